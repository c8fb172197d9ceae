"""Every bundled plugin (``plugins/<fw>/tether_<fw>``) imports without its framework, declares ``EXTRA`` and
``REQUIRES``, is packaged and registered as an entry point, and is listed as unavailable with its
``pip install "tether[<extra>]"`` hint when its framework is missing — without breaking the other plugins. All
follow one layout (docs/plugin-tutorial.md): ``plugins/<fw>/tether_<fw>/`` with ``__init__.py`` (EXTRA, REQUIRES
and every hook implementation), ``adapter.py`` (the adapter classes) or ``tracer.py`` (a tracer-only plugin's
tracers), and the same module name for the same job in every plugin. ``plugins/_template`` (folders starting with
``_``) is no plugin: tests/core/plugin/test_plugin_tutorial.py checks it.
``plugins/<name>_base`` is a base package that
plugins may share (``tether_langchain_base``, for langchain and langgraph): packaged, but with no entry point,
hooks or extra, importing no plugin and no framework at import time."""

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

ROOT = Path(__file__).resolve().parents[3]


def _is_base(folder: Path) -> bool:
    """``plugins/<name>_base``: code two plugins share (not a plugin: no entry point, hooks or extra)."""
    return folder.name.endswith("_base")


BUNDLED = sorted(
    p
    for p in ROOT.glob("plugins/*/tether_*")
    if (p / "__init__.py").is_file() and not p.parent.name.startswith("_") and not _is_base(p.parent)
)
BASES = sorted(p for p in ROOT.glob("plugins/*/tether_*") if (p / "__init__.py").is_file() and _is_base(p.parent))
#: module names for a job some plugins share, and the names the same job must not go by
_JOB_NAMES = {
    "capture": ("handler", "handlers", "callbacks", "hooks", "events", "listener"),
    "names": ("naming", "agent_names", "resolver"),
    "tools": ("tool", "tool_calls", "tool_spans"),
    "tracer": ("tracing", "spans"),
}


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


def test_every_plugin_folder_holds_one_package_named_after_it() -> None:
    folders = sorted(p for p in (ROOT / "plugins").iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    # a base package follows the same naming: plugins/langchain_base/tether_langchain_base
    wrong = []
    for folder in folders:
        packages = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())
        if packages != [f"tether_{folder.name}"]:
            wrong.append(f"plugins/{folder.name} holds {packages}, expected ['tether_{folder.name}']")
    assert not wrong, "\n".join(wrong)
    assert len(BUNDLED) + len(BASES) == len(folders)


def _classes_by_base(package_dir: Path) -> dict[str, list[str]]:
    """Module stem -> the classes it defines whose bases name ``Adapter`` or ``Tracer``."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                for base in bases & {"Adapter", "Tracer"}:
                    found.setdefault(base, []).append(f"{path.stem}:{node.name}")
    return found


#: the builders of ``tether.plugin.hookimpls``: ``register_adapters = adapters_hook(MyAdapter)`` is a hook too
_HOOK_BUILDERS = {"adapters_hook", "rollout_hook"}


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def _hookimpls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_name(d) == "hookimpl" for d in node.decorator_list):
                found.append(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _name(node.value.func) in _HOOK_BUILDERS:
                found += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return found


@pytest.mark.parametrize("package_dir", BUNDLED, ids=[p.name for p in BUNDLED])
def test_follows_the_plugin_layout(package_dir: Path) -> None:
    modules = {p.stem for p in package_dir.glob("*.py")}
    classes = _classes_by_base(package_dir)
    assert classes, f"{package_dir.name} defines no Adapter or Tracer subclass"
    for base, home in (("Adapter", "adapter"), ("Tracer", "tracer")):
        misplaced = [c for c in classes.get(base, []) if not c.startswith(f"{home}:")]
        assert not misplaced, f"{package_dir.name}: {base} subclasses live in {home}.py, found {misplaced}"
    elsewhere = [
        f"{p.name}:{name}"
        for p in sorted(package_dir.glob("*.py"))
        if p.name != "__init__.py"
        for name in _hookimpls(p)
    ]
    assert not elsewhere, f"{package_dir.name}: hook implementations belong in __init__.py, found {elsewhere}"
    assert _hookimpls(package_dir / "__init__.py"), f"{package_dir.name}/__init__.py implements no hook"
    for job, other_names in _JOB_NAMES.items():
        clash = sorted(modules & set(other_names))
        assert not clash, f"{package_dir.name}: rename {clash} to {job}.py, the name every plugin gives that job"
    assert not [p for p in package_dir.iterdir() if p.is_dir() and p.name != "__pycache__"], (
        f"{package_dir.name}: keep the plugin one flat package (modules, no sub-packages)"
    )


def test_the_langchain_base_is_shared_by_langchain_and_langgraph() -> None:
    assert [p.name for p in BASES] == ["tether_langchain_base"]
    users = sorted(
        d.name for d in BUNDLED if any("tether_langchain_base" in p.read_text() for p in d.glob("*.py"))
    )
    assert users == ["tether_langchain", "tether_langgraph"]


@pytest.mark.parametrize("base_dir", BASES, ids=[p.name for p in BASES])
def test_a_base_package_is_packaged_but_no_plugin(base_dir: Path) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folder = base_dir.parent.relative_to(ROOT).as_posix()
    assert folder in pyproject["tool"]["setuptools"]["packages"]["find"]["where"]
    assert folder in pyproject["tool"]["mypy"]["mypy_path"].replace("\\\n", "").replace(" ", "").split(":")
    assert base_dir.name in pyproject["tool"]["ruff"]["lint"]["isort"]["known-first-party"]
    assert base_dir.name not in pyproject["project"]["entry-points"]["tether"].values()
    assert not _declared(base_dir), f"{base_dir.name} is no plugin: no EXTRA or REQUIRES"
    hooks = [f"{p.name}:{h}" for p in sorted(base_dir.glob("*.py")) for h in _hookimpls(p)]
    assert not hooks, f"{base_dir.name} is no plugin: no hook implementations ({hooks})"
    plugins = {d.name for d in BUNDLED}
    for path in sorted(base_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            assert not {n.split(".")[0] for n in names} & plugins, f"{path.name}:{node.lineno} imports a plugin"
    modules = [f"{base_dir.name}.{p.stem}" for p in sorted(base_dir.glob("*.py")) if p.stem != "__init__"]
    probe = (
        f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('langchain', 'langchain_core', 'langsmith',"
        " 'langgraph')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"importing {base_dir.name} imported {done.stdout.strip()}"
