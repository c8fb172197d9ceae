"""The structure of the core package: its import graph has no circle, its packages keep their layers (no
folder reaches up to one above it), algorithms never reach up to the trainer, and the plugin contract imports
nothing above the types it speaks.

Every import of a ``tether`` module counts — at module level, under ``TYPE_CHECKING``, and inside functions
(a lazy import is still a dependency; hiding a circle in a function is how the knots this test guards
against were tied). ``from tether.x import y`` counts as an import of ``tether.x.y`` when that is a module,
else of ``tether.x``. A package's ``__init__`` is not counted as imported by its own submodules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "core"
PACKAGE = ROOT / "tether"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path], this: str | None = None) -> set[str]:
    """The tether modules ``path`` (the module named ``this``) imports, by any route."""
    this = this or _module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {m for m in found if m in modules and m != this and not this.startswith(m + ".")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_walker_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tether.trainer import Trainer\n"
        "def f():\n    from tether.training.engine import session\n    import tether.training.engine.runner\n"
    )
    assert _imports(source, _modules(), "tether.probe") == {
        "tether.trainer",
        "tether.training.engine.session",
        "tether.training.engine.runner",
    }


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_core_import_graph_has_no_circle() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import circles in core/tether: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_algorithms_never_import_the_trainer() -> None:
    offenders = {
        name: sorted(targets & {"tether.trainer"})
        for name, targets in _graph().items()
        if name.startswith("tether.algorithms") and "tether.trainer" in targets
    }
    assert not offenders, f"algorithms must not import the trainer: {offenders}"


def test_the_plugin_contract_imports_nothing_above_it() -> None:
    allowed = {
        "tether.types",
        "tether.spans",
        "tether._json",
        "tether.capture.context",
        "tether.plugin.instrument",
        "tether.plugin.adapters",
    }
    graph = _graph()
    for contract in ("tether.plugin.adapters", "tether.plugin.hookspecs"):
        above = graph[contract] - allowed
        assert not above, f"{contract} imports {sorted(above)}; the plugin contract may import only {allowed}"


#: the ground floor: records, the span schema and small helpers, importable from anywhere
GROUND = {
    "types",
    "spans",
    "policies",
    "_json",
    "_deadlines",
    "_http11",
    "_loop",
    "_net",
    "_seeds",
    "_site",
    "_slots",
}

#: each package (or top-level module above the ground) and the packages it may import, besides the ground:
#: the layers of the architecture, lowest first. A package may use anything below it, never above.
LAYERS: dict[str, set[str]] = {
    "store": set(),
    "models": set(),
    "capture": {"store"},
    "rewards": {"models"},
    "plugin": {"capture", "store", "rewards"},
    "otel": {"store"},
    "proxy": {"capture", "models", "store"},
    "training": {"rewards", "plugin", "capture", "store", "models", "proxy", "otel"},
    "algorithms": {"training", "rewards", "plugin", "capture", "store", "models", "proxy", "otel"},
    "dashboard": {"algorithms", "training", "rewards", "plugin", "capture", "store", "models", "proxy", "otel"},
    "trainer": {"algorithms", "training", "rewards", "plugin", "capture", "store", "models", "proxy", "otel"},
    "testing": {
        "trainer",
        "algorithms",
        "training",
        "rewards",
        "plugin",
        "capture",
        "store",
        "models",
        "proxy",
        "otel",
    },
    "server": {"dashboard", "otel", "store"},
    "cli": {
        "server",
        "dashboard",
        "trainer",
        "algorithms",
        "training",
        "rewards",
        "plugin",
        "capture",
        "store",
        "models",
        "proxy",
        "otel",
    },
}


def _floor(module: str) -> str:
    """The package (or top-level module) ``tether.x.y`` belongs to: ``x``; ``tether`` itself is ``tether``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


def test_every_package_has_a_layer() -> None:
    floors = {_floor(m) for m in _modules()} - {"tether"}
    unplaced = floors - GROUND - set(LAYERS)
    assert not unplaced, f"place these in GROUND or LAYERS (and so in the architecture): {sorted(unplaced)}"


def test_no_package_reaches_up() -> None:
    upward = []
    for module, targets in _graph().items():
        floor = _floor(module)
        if floor == "tether":  # the public API re-exports from every floor
            continue
        allowed = GROUND | LAYERS.get(floor, set()) | {floor}
        upward += [f"{module} -> {t}" for t in sorted(targets) if _floor(t) not in allowed]
    assert not upward, "imports that reach up a layer: " + "; ".join(upward)


def test_the_layer_checker_catches_an_upward_tie(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text("from tether.training.engine.session import Session\n")
    targets = _imports(source, _modules(), "tether.store.probe")
    allowed = GROUND | LAYERS["store"] | {"store"}
    assert [t for t in targets if _floor(t) not in allowed] == ["tether.training.engine.session"]


#: the store's folders per backend: each uses the shared contract (``tether.store.*`` modules), never another
STORE_BACKENDS = {"memory", "sqlite", "postgres", "http"}


def _part(module: str, package: str) -> str | None:
    """The folder (or module) of ``tether.<package>`` that ``module`` is in, if it is in that package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == package else None


def test_store_backends_use_the_contract_never_each_other() -> None:
    crossing = []
    for module, targets in _graph().items():
        mine = _part(module, "store")
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = _part(target, "store")
            if theirs in STORE_BACKENDS and theirs != mine:
                crossing.append(f"{module} -> {target}")
    assert not crossing, "a store backend (or the shared contract) imports a backend: " + "; ".join(crossing)


def test_the_learning_signal_imports_no_engine_and_no_run_bookkeeping() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if _part(module, "training") == "signal"
        for target in sorted(targets)
        if _part(target, "training") in {"engine", "run"}
    ]
    assert not upward, "training.signal reaches up into the engine or the run's bookkeeping: " + "; ".join(upward)


def _plugin_requirements() -> dict[str, set[str]]:
    """Each bundled plugin package and the top-level modules its ``REQUIRES`` names (read without importing)."""
    found: dict[str, set[str]] = {}
    for init in sorted(ROOT.parent.glob("plugins/*/tether_*/__init__.py")):
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REQUIRES" for t in node.targets):
                found[init.parent.name] = set(ast.literal_eval(node.value))
    return found


def test_the_core_holds_no_framework_code() -> None:
    """No core module imports a plugin, a plugins' base package or a framework (LangChain's shared callbacks
    live in ``plugins/langchain_base``), by any route; ``openai``, which the endpoint redirect and the fake LLM
    speak, is the one exception."""
    requirements = _plugin_requirements()
    assert "tether_langchain" in requirements and "langchain_core" in requirements["tether_langchain"]
    # ``google`` is a namespace: google-adk's ``google.adk`` and protobuf's ``google.protobuf`` (OTLP) share it
    frameworks = set().union(*requirements.values()) - {"openai", "google"}
    bases = {p.name for p in ROOT.parent.glob("plugins/*/tether_*")}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            top = {n.split(".")[0] for n in names}
            bad = top & (frameworks | bases)
            if bad:
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} imports {sorted(bad)}")
    assert not found, "\n".join(found)
