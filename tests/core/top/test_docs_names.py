"""The files and Python names the docs cite exist: every repository path in backticks (``core/tether/...py``,
``tests/...``, ``bench/...``, ``examples/...``, ``plugins/...``) and every dotted ``tether.…`` name, found as
a module and a top-level name of its source (read, not imported: no torch or framework needed), or else as a
key the code writes (a metadata or span attribute such as ``tether.phase``: a string literal in the core's
source). Modules move (issue 38 moved many); a page that cites the old place fails here."""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_PATH = re.compile(r"`((?:core|plugins|tests|bench|examples)/[\w./-]*\w)(?:::\w+)?[`\s]")
_NAME = re.compile(r"`(tether(?:\.\w+)+)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@cache
def _top_level(source: Path) -> frozenset[str]:
    """The names a module's source defines or imports at its top level (``__getattr__`` names too, loosely)."""
    tree = ast.parse(source.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if "__getattr__" in names:  # lazy names: listed in __all__ or as strings in the source
        names |= set(re.findall(r"\"(\w+)\"", source.read_text()))
    return frozenset(names)


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        source = _module_file(".".join(parts[:cut]))
        if source is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        if rest[0] in _top_level(source):
            return True  # (attributes of that name are not followed)
        package = source.parent if source.name == "__init__.py" else None
        return package is not None and (package / rest[0]).is_dir()
    return False


def test_every_path_the_docs_cite_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in _pages()
        for path in _PATH.findall(page.read_text())
        if not any(ROOT.glob(path.rstrip("/"))) and "<" not in path and "*" not in path
    ]
    assert not missing, f"paths the docs cite that do not exist: {missing}"


@cache
def _keys() -> frozenset[str]:
    """The ``"tether.…"`` string literals of the core's source: the metadata and attribute keys it writes."""
    return frozenset(
        key
        for source in (ROOT / "core" / "tether").rglob("*.py")
        for key in re.findall(r"\"(tether\.[\w.]+)", source.read_text())
    )


def test_every_tether_name_the_docs_cite_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in _pages()
        for name in sorted(set(_NAME.findall(page.read_text())))
        if not _resolves(name.rstrip(".")) and name.rstrip(".") not in _keys()
    ]
    assert not missing, f"tether names the docs cite that the code lacks: {missing}"


def test_a_name_that_is_gone_is_found_missing() -> None:
    assert _resolves("tether.plugin.loop_pool.LoopPool")
    assert not _resolves("tether.plugin.loop_pool.NoSuchPool")
    assert not _resolves("tether.no_such_module.thing")
