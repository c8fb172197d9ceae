"""The README is the front door and docs/ the manual: every page is reachable from the README, every local link
resolves, every example has a README, and the front door stays short."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 200


def _local_links(page: Path) -> list[str]:
    targets = [t.split("#", 1)[0] for t in _LINK.findall(page.read_text())]
    return [t for t in targets if t and not re.match(r"^[a-z]+:", t)]


def _pages() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").glob("*/README.md")),
    ]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t).resolve() for t in _local_links(ROOT / "README.md")}
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages, "docs/ holds no page"
    unlinked = [p.name for p in pages if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_every_example_has_a_readme_linked_from_the_readme() -> None:
    linked = {(ROOT / t).resolve() for t in _local_links(ROOT / "README.md")}
    examples = [d for d in sorted((ROOT / "examples").iterdir()) if d.is_dir() and (d / "train.py").exists()]
    assert examples
    missing = [d.name for d in examples if not (d / "README.md").exists()]
    assert not missing, f"examples without a README.md: {missing}"
    unlinked = [d.name for d in examples if (d / "README.md").resolve() not in linked]
    assert not unlinked, f"example READMEs the README does not link: {unlinked}"


def test_every_local_link_resolves() -> None:
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in _pages()
        for target in _local_links(page)
        if not (page.parent / target).exists()
    ]
    assert not broken, "broken links: " + "; ".join(broken)


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < README_MAX_LINES
    commands = re.search(r"```bash\n(.*?)```", text, re.S)
    assert commands, "the README opens with its set-up commands"
    lines = [line for line in commands.group(1).splitlines() if line.strip()]
    assert [line.split("#")[0].strip() for line in lines] == [
        'pip install -e ".[demo]" && tether demo',
        "pip install tox && tox",
    ]


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("see [a](missing.md), [b](https://example.org) and [c](page.md#top)")
    assert _local_links(page) == ["missing.md", "page.md"]


def test_every_tox_env_is_in_the_development_table() -> None:
    """docs/development.md's table of tox envs lists every env of tox.ini's envlist (it drifted before)."""
    root = Path(__file__).resolve().parents[3]
    envlist = re.search(r"^envlist = (.*)$", (root / "tox.ini").read_text(), re.M)
    assert envlist is not None
    table = (root / "docs" / "development.md").read_text()
    missing = [env for env in envlist.group(1).split(", ") if f"`{env}`" not in table]
    assert not missing, f"docs/development.md's tox table lacks {missing}"
