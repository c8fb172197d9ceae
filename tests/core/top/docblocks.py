"""The Python blocks of ``docs/*.md``, for the tests that run them as written (``run_block``) and the test that
checks every block is run by one of them or marked ``<!-- not run: <reason> -->`` on the line before its fence.

A block is named ``<page>:<n>``: the n-th Python block of ``docs/<page>``, counted from 1. A test runs it with
``run_block(name, namespace, swaps)``: each swap replaces text the block must still contain (a swap that no
longer matches fails, naming it), so only what a test machine lacks is swapped in (a fake LLM's URL for an API's,
one step for a hundred), and the block runs in ``namespace``, where the test has put what the page leaves to
the reader (``my_agent``, ``tasks``). Tracebacks point at the page's line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str  # the file name under docs/
    index: int  # 1-based, among the page's Python blocks
    line: int  # the fence's line, 1-based
    code: str
    #: the line before the fence, when it is an HTML comment (the marker, or something that should be)
    comment: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.index}"

    @property
    def not_run(self) -> str | None:
        """The marked reason this block is not run, or None."""
        found = MARKER.match(self.comment or "")
        return found.group("reason") if found else None


def page_blocks(path: Path) -> list[Block]:
    """The Python blocks of one page, in order."""
    text = path.read_text()
    found = []
    for index, match in enumerate(_FENCE.finditer(text), start=1):
        before = text[: match.start()].rstrip("\n").splitlines()
        last = before[-1].strip() if before else ""
        found.append(
            Block(
                page=path.name,
                index=index,
                line=text.count("\n", 0, match.start()) + 1,
                code=match.group(1),
                comment=last if last.startswith("<!--") else None,
            )
        )
    return found


def blocks() -> list[Block]:
    """Every Python block of docs/*.md."""
    return [b for page in sorted(DOCS.glob("*.md")) for b in page_blocks(page)]


def block(name: str) -> Block:
    """The block named ``<page>:<n>``."""
    page, _, index = name.rpartition(":")
    for candidate in page_blocks(DOCS / page):
        if candidate.index == int(index):
            return candidate
    raise LookupError(f"docs/{page} has no Python block {index}")


def run_block(name: str, namespace: dict[str, Any], swaps: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the block ``name`` in ``namespace`` with ``swaps`` applied; returns the namespace."""
    found = block(name)
    assert found.not_run is None, f"{name} is marked not run ({found.not_run}): a test may not run it"
    code = found.code
    for old, new in (swaps or {}).items():
        assert old in code, (
            f"docs/{found.page} block {found.index} no longer says {old!r}: update the test's swaps"
        )
        code = code.replace(old, new)
    # blank lines keep the page's line numbers in tracebacks
    exec(compile("\n" * found.line + code, f"docs/{found.page}", "exec"), namespace)
    return namespace


def claimed(test_file: Path) -> list[str]:
    """The block names a test file runs: the string constants its ``run_block(...)`` calls start with (also
    ``asyncio.to_thread(run_block, "<name>", ...)``)."""
    tree = ast.parse(test_file.read_text())
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        args = node.args
        if getattr(node.func, "id", getattr(node.func, "attr", None)) != "run_block":
            if not (args and isinstance(args[0], ast.Name) and args[0].id == "run_block"):
                continue
            args = args[1:]
        first = args[0] if args else None
        assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
            f"{test_file.name}:{node.lineno}: run_block's first argument is a block name written out"
        )
        names.append(first.value)
    return names
