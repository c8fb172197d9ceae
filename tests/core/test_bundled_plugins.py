"""Every bundled plugin (``plugins/<fw>/tether_<fw>``) imports without its framework, declares ``EXTRA`` and
``REQUIRES``, is packaged and registered as an entry point, and is listed as unavailable with its
``pip install "tether[<extra>]"`` hint when its framework is missing — without breaking the other plugins."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted(p for p in ROOT.glob("plugins/*/tether_*") if (p / "__init__.py").is_file())


def _declared(package_dir: Path) -> dict[str, Any]:
    """EXTRA and REQUIRES as literals at the top of the package's ``__init__.py`` (read without importing)."""
    tree = ast.parse((package_dir / "__init__.py").read_text())
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in ("EXTRA", "REQUIRES") and node.value is not None:
                    found[target.id] = ast.literal_eval(node.value)
    return found


def _entry_point(package: str) -> importlib.metadata.EntryPoint | None:
    for ep in importlib.metadata.entry_points(group="tether"):
        if ep.module == package:
            return ep
    return None


def test_there_are_bundled_plugins() -> None:
    assert any(p.name == "tether_openai" for p in BUNDLED), [str(p) for p in BUNDLED]


@pytest.mark.parametrize("package_dir", BUNDLED, ids=[p.name for p in BUNDLED])
def test_declares_extra_and_requires_and_is_packaged(package_dir: Path) -> None:
    declared = _declared(package_dir)
    assert isinstance(declared.get("EXTRA"), str) and declared["EXTRA"], (
        f"{package_dir}/__init__.py must set EXTRA = '<extra>' (a string literal)"
    )
    requires = declared.get("REQUIRES")
    assert isinstance(requires, tuple) and requires and all(isinstance(m, str) for m in requires), (
        f"{package_dir}/__init__.py must set REQUIRES = ('<top-level module>', ...) (a tuple literal)"
    )
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    folder = package_dir.parent.relative_to(ROOT).as_posix()
    assert folder in pyproject["tool"]["setuptools"]["packages"]["find"]["where"], (
        f"add {folder!r} to [tool.setuptools.packages.find] where in pyproject.toml"
    )
    assert declared["EXTRA"] in project["optional-dependencies"], (
        f"declare the extra [project.optional-dependencies] {declared['EXTRA']} in pyproject.toml"
    )
    assert package_dir.name in project["entry-points"]["tether"].values(), (
        f"declare [project.entry-points.tether] <name> = {package_dir.name!r} in pyproject.toml"
    )
    assert _entry_point(package_dir.name) is not None, (
        f"{package_dir.name} is in pyproject.toml but not installed as an entry point: re-run pip install -e ."
    )


# Runs in a fresh interpreter with the framework's modules made unimportable, then reports what it saw.
_PROBE = textwrap.dedent(
    """
    import importlib.abc, json, sys

    package, blocked = sys.argv[1], sys.argv[2].split(",")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is blocked for this test", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    for name in list(sys.modules):
        if name.split(".")[0] in blocked:
            del sys.modules[name]
    for name in blocked:
        sys.modules[name] = None  # `import x` fails and importlib.util.find_spec(x) is None, as if not installed

    module = __import__(package)
    import tether
    from tether.plugin.manager import reset_plugins

    reset_plugins()
    plugins = tether.get_plugins()
    print(json.dumps({
        "EXTRA": getattr(module, "EXTRA", None),
        "REQUIRES": list(getattr(module, "REQUIRES", None) or []),
        "imported_framework": sorted(
            n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in blocked
        ),
        "unavailable": [
            {"name": u.name, "reason": u.reason, "hint": u.hint, "missing": u.missing} for u in plugins.unavailable
        ],
        "loaded": [p.name for p in plugins.loaded()],
    }))
    """
)


@pytest.mark.parametrize("package_dir", BUNDLED, ids=[p.name for p in BUNDLED])
def test_imports_without_its_framework_and_is_listed_unavailable_with_the_hint(package_dir: Path) -> None:
    declared = _declared(package_dir)
    requires = list(declared["REQUIRES"])
    ep = _entry_point(package_dir.name)
    assert ep is not None, f"{package_dir.name} is not installed as a tether entry point"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, package_dir.name, ",".join(requires)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"{package_dir.name} failed to import without {requires}:\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["EXTRA"] == declared["EXTRA"] and seen["REQUIRES"] == requires
    assert seen["imported_framework"] == [], f"importing {package_dir.name} imported {seen['imported_framework']}"
    entries = [u for u in seen["unavailable"] if u["name"] == ep.name]
    assert entries, f"get_plugins() does not list {ep.name!r} as unavailable: {seen['unavailable']}"
    (entry,) = entries
    assert entry["hint"] == f'pip install "tether[{declared["EXTRA"]}]"'
    assert entry["missing"] == requires and "not installed" in entry["reason"]
    assert ep.name not in seen["loaded"]
    others = [
        e.name
        for d in BUNDLED
        if d != package_dir
        and (e := _entry_point(d.name)) is not None
        and not set(_declared(d)["REQUIRES"]) & set(requires)
        and all(importlib.util.find_spec(m) is not None for m in _declared(d)["REQUIRES"])
    ]
    assert set(others) <= set(seen["loaded"]), "a missing framework must not break the other plugins"


@pytest.mark.parametrize("package_dir", BUNDLED, ids=[p.name for p in BUNDLED])
def test_loads_when_its_framework_is_installed(package_dir: Path) -> None:
    requires = list(_declared(package_dir)["REQUIRES"])
    if any(importlib.util.find_spec(m) is None for m in requires):
        pytest.skip(f"{requires} not installed in this environment (its own tox env tests it)")
    from tether.plugin.manager import build

    ep = _entry_point(package_dir.name)
    assert ep is not None
    plugins = build()
    assert ep.name in {p.name for p in plugins.loaded()}, [u.reason for u in plugins.unavailable]


@pytest.mark.parametrize("package_dir", BUNDLED, ids=[p.name for p in BUNDLED])
def test_imports_no_other_plugin(package_dir: Path) -> None:
    """A framework plugin builds on the core (``tether.*``), never on another plugin: what several need, such
    as the endpoint redirect, belongs in the core."""
    others = {d.name for d in BUNDLED} - {package_dir.name}
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            found += [f"{where} imports {n}" for n in names if n.split(".")[0] in others]
    assert not found, "\n".join(found)
