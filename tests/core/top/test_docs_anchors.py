"""Every link into a page's section (``page.md#section``) names a heading the page has, as GitHub makes a
heading's anchor: the docs link into each other's sections and into ``bench/results.md``'s dated reports, and a
renamed heading would leave the link pointing at the page's top."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_LINK = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading).lower()  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # no headings inside code blocks
    return {slug(h) for h in _HEADING.findall(text)}


def _pages() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").glob("*/README.md")),
        *sorted((ROOT / "bench").glob("*.md")),
    ]


def test_every_section_link_names_a_heading() -> None:
    broken = []
    for page in _pages():
        for target, anchor in _LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # another site's page
            linked = (page.parent / target) if target else page
            if linked.suffix == ".md" and linked.exists() and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, "links to headings the page lacks: " + "; ".join(broken)


def test_the_slug_is_githubs() -> None:
    assert slug("Issue 36: the demo's cost (2026-11-28)") == "issue-36-the-demos-cost-2026-11-28"
    assert slug("CI runs (`.ci/run`)") == "ci-runs-cirun"
    assert slug("With SmolLM2-135M-Instruct: `tether demo --model smollm2`") == (
        "with-smollm2-135m-instruct-tether-demo---model-smollm2"
    )
