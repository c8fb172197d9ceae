"""The plugin manager: hooks, blocking, misspelled hooks, adapter choice (each manager answers from its own
plugins), unavailable plugins, and the plugin contract's place at the bottom of the import graph.

Each test builds its own manager (``build(entry_points=False)``); tests of ``tether.wrap``, which asks the
process-wide manager, install theirs with ``reset_plugins`` explicitly (the ``process_wide`` fixture)."""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy
import pytest

import tether
from tether.plugin import hookspecs
from tether.plugin.adapters import Adapter
from tether.plugin.hookimpls import adapters_hook, rollout_hook
from tether.plugin.manager import AdapterNotFound, Plugins, UnavailablePlugin, build, reset_plugins
from tether.types import Resources, Rollout

ROOT = Path(__file__).resolve().parents[3]
HOOKS = sorted(n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), "tether_spec"))


class _ListAdapter(Adapter):
    """Runs plain lists (a toy framework for these tests)."""

    name = "lists"

    def accepts(self, agent: Any) -> bool:
        return isinstance(agent, list)

    def instrument(self, sink: Any) -> None:
        pass

    def uninstrument(self) -> None:
        pass

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        return [*agent, task]


class _AnyListAdapter(_ListAdapter):
    name = "any-list"


class _ListPlugin:
    def __init__(self, *adapters: Adapter) -> None:
        self.adapters = adapters
        self.contexts: list[str] = []

    @tether.hookimpl
    def register_adapters(self, register: Any) -> None:
        for adapter in self.adapters:
            register(adapter)

    @tether.hookimpl
    def rollout_context(self, rollout: Rollout) -> Any:
        @asynccontextmanager
        async def _ctx() -> Any:
            self.contexts.append(f"enter {rollout.rollout_id}")
            yield
            self.contexts.append(f"exit {rollout.rollout_id}")

        return _ctx()


class _DictAdapter(_ListAdapter):
    name = "dicts"

    def accepts(self, agent: Any) -> bool:
        return isinstance(agent, dict)


@pytest.fixture
def process_wide() -> Iterator[Callable[[Plugins], Plugins]]:
    """Make a manager the process-wide one (what ``tether.wrap`` asks) for one test, then forget it."""

    def install(plugins: Plugins) -> Plugins:
        reset_plugins(plugins)
        return plugins

    yield install
    reset_plugins()


def test_hook_names_are_the_documented_contract() -> None:
    assert HOOKS == ["adapter_for", "register_adapters", "register_tracers", "rollout_context"]


def test_every_hookspec_has_a_section_in_the_plugin_guide_with_its_signature() -> None:
    readme = (ROOT / "docs" / "plugins.md").read_text()
    for name in HOOKS:
        assert re.search(rf"^#+ `{name}\(", readme, re.M), f"docs/plugins.md lacks a section for hook {name}"
        params = list(
            getattr(hookspecs, name).__code__.co_varnames[: getattr(hookspecs, name).__code__.co_argcount]
        )
        assert f"`{name}({', '.join(params)})" in readme, f"docs/plugins.md: {name}'s signature is out of date"


def test_every_hook_is_implemented_by_a_test() -> None:
    """datasette's second meta-test: a hook no test implements is a hook whose contract nothing checks."""
    implemented: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                _is_hookimpl(d) for d in node.decorator_list
            ):
                implemented.add(node.name)
    untested = [name for name in HOOKS if name not in implemented]
    assert not untested, f"no test under tests/ implements the hook(s) {', '.join(untested)}: add one"


def _is_hookimpl(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
    return name == "hookimpl"


def test_a_manager_without_entry_points_starts_empty() -> None:
    plugins = build(entry_points=False)
    assert plugins.loaded() == [] and plugins.adapters() == [] and plugins.unavailable == []
    with pytest.raises(AdapterNotFound, match=r"no adapter accepts builtins\.list.*\(loaded: none\)"):
        plugins.adapter_for([1])


def test_adapter_for_answers_from_its_own_manager_not_the_process_wide_one(
    process_wide: Callable[[Plugins], Plugins],
) -> None:
    process_wide(build(entry_points=False))  # the process-wide manager knows no adapter
    plugins = build(entry_points=False)
    adapter = _DictAdapter()
    plugins.register(_ListPlugin(adapter), name="dicts")
    assert plugins.adapter_for({}) is adapter
    with pytest.raises(AdapterNotFound, match=r"no adapter accepts builtins\.dict"):
        tether.get_plugins().adapter_for({})


def test_register_adapters_and_adapter_for() -> None:
    plugins = build(entry_points=False)
    adapter = _ListAdapter()
    plugins.register(_ListPlugin(adapter), name="lists")
    assert plugins.adapters() == [adapter]
    assert plugins.adapter_for([1, 2]) is adapter
    with pytest.raises(AdapterNotFound, match=r'no adapter accepts builtins\.dict; pass adapter="\.\.\."'):
        plugins.adapter_for({})


def test_two_adapters_claiming_one_agent_is_an_error_naming_adapter_kwarg(
    process_wide: Callable[[Plugins], Plugins],
) -> None:
    plugins = process_wide(build(entry_points=False))
    plugins.register(_ListPlugin(_ListAdapter(), _AnyListAdapter()), name="lists")
    with pytest.raises(
        AdapterNotFound, match=r'several adapters accept list \(lists, any-list\).*adapter="lists"'
    ):
        tether.wrap([1])
    wrapped = tether.wrap([1], adapter="any-list")
    assert wrapped.adapter.name == "any-list"


def test_adapter_for_hook_answer_wins_over_accepts() -> None:
    chosen = _AnyListAdapter()

    class _Picker:
        @tether.hookimpl
        def adapter_for(self, agent: Any) -> Adapter | None:
            return chosen if agent == ["pick me"] else None

    plugins = build(entry_points=False)
    plugins.register(_ListPlugin(_ListAdapter()), name="lists")
    plugins.register(_Picker(), name="picker")
    assert plugins.adapter_for(["pick me"]) is chosen
    assert plugins.adapter_for(["other"]).name == "lists"


def test_register_tracers_collects_tracers_and_rejects_other_objects() -> None:
    tracer = _ListAdapter()

    class _TracerPlugin:
        @tether.hookimpl
        def register_tracers(self, register: Any) -> None:
            register(tracer)

    class _BadTracerPlugin:
        @tether.hookimpl
        def register_tracers(self, register: Any) -> None:
            register("not a tracer")

    plugins = build(entry_points=False)
    plugins.register(_TracerPlugin(), name="tracer")
    assert plugins.tracers() == [tracer]
    plugins.register(_BadTracerPlugin(), name="bad")
    with pytest.raises(TypeError, match="register\\(\\) takes Tracer instances"):
        plugins.tracers()


def test_rollout_context_returns_managers_and_skips_none() -> None:
    plugin = _ListPlugin()

    class _NoContext:
        @tether.hookimpl
        def rollout_context(self, rollout: Rollout) -> None:
            return None

    plugins = build(entry_points=False)
    plugins.register(plugin, name="lists")
    plugins.register(_NoContext(), name="none")
    rollout = Rollout(rollout_id="ro-1", input="x", task_id="t")
    managers = plugins.rollout_contexts(rollout)
    assert len(managers) == 1


def test_misspelled_hook_is_rejected_with_the_known_hooks() -> None:
    class _Typo:
        @tether.hookimpl
        def register_adapter(self, register: Any) -> None:  # missing "s"
            pass

    plugins = build(entry_points=False)
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook\\(s\\) register_adapter; the hooks are"):
        plugins.register(_Typo(), name="typo")
    assert "typo" not in {p.name for p in plugins.loaded()}


def test_disable_env_blocks_plugins_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DISABLE_PLUGINS", "lists, other")
    plugins = build()
    with pytest.raises(ValueError, match="blocked by TETHER_DISABLE_PLUGINS"):
        plugins.register(_ListPlugin(_ListAdapter()), name="lists")
    plugins.register(_ListPlugin(_ListAdapter()), name="fine")


def test_adapter_named_unknown_lists_loaded(process_wide: Callable[[Plugins], Plugins]) -> None:
    process_wide(build(entry_points=False)).register(_ListPlugin(_ListAdapter()), name="lists")
    with pytest.raises(AdapterNotFound, match=r"no adapter named 'nope' \(loaded: lists\)"):
        tether.wrap([1], adapter="nope")


def test_wrap_validates_arguments(process_wide: Callable[[Plugins], Plugins]) -> None:
    process_wide(build(entry_points=False)).register(_ListPlugin(_ListAdapter()), name="lists")
    with pytest.raises(TypeError, match="reward must be a function"):
        tether.wrap([1], reward=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimize= takes sub-agent names"):
        tether.wrap([1], optimize=[""])
    wrapped = tether.wrap([1], optimize="writer")
    assert wrapped.optimize == frozenset({"writer"})
    assert wrapped.is_trainable("writer") and not wrapped.is_trainable("checker")


def test_import_tether_is_light() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import tether, tether.capture.redirect,"
        " tether.training.engine.runner\n"
        "heavy = [m for m in ('torch', 'aiohttp', 'openai', 'langgraph', 'langchain_core', 'autogen_agentchat',"
        " 'agents', 'crewai', 'transformers', 'vllm', 'langchain', 'langchain_classic', 'tensorboard', 'wandb',"
        " 'mlflow') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _tether_imports(module: str, *, runtime_only: bool) -> set[str]:
    """The ``tether.*`` modules ``tether.<module>`` imports (skipping ``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse((ROOT / "core" / "tether" / f"{module.replace('.', '/')}.py").read_text())
    skipped: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tether":
            found |= {f"{node.module}.{a.name}" if node.module == "tether" else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "tether"}
    return found


def test_the_plugin_contract_imports_nothing_above_it() -> None:
    assert _tether_imports("plugin.adapters", runtime_only=False) <= {
        "tether._json",
        "tether.types",
        "tether.spans",
        "tether.capture.context",
        "tether.plugin.instrument",
    }
    assert _tether_imports("plugin.hookspecs", runtime_only=True) == set()


def test_install_hint_spells_the_extra_not_the_plugin_name() -> None:
    plugins = build(entry_points=False)
    plugins.unavailable.append(
        UnavailablePlugin("openai_agents", "not installed: agents", hint='pip install "tether[openai-agents]"')
    )
    with pytest.raises(AdapterNotFound) as caught:
        plugins.adapter_for({})
    assert 'pip install "tether[openai-agents]"' in str(caught.value)
    assert "openai_agents]" not in str(caught.value)


class _NeedsImport(_ListAdapter):
    """Would run lists if its framework were imported (as the openai adapter does plain functions)."""

    name = "later"

    def accepts(self, agent: Any) -> bool:
        return False

    def hint_for(self, agent: Any) -> str | None:
        return "pass adapter='later' or import later first" if isinstance(agent, list) else None


def test_an_adapters_hint_replaces_the_install_hints() -> None:
    plugins = build(entry_points=False)
    plugins.register(_ListPlugin(_NeedsImport()), name="later")
    plugins.unavailable.append(
        UnavailablePlugin("crewai", "not installed: crewai", hint='pip install "tether[crewai]"')
    )
    with pytest.raises(AdapterNotFound) as caught:
        plugins.adapter_for([1])
    assert "pass adapter='later' or import later first" in str(caught.value)
    assert "pip install" not in str(caught.value), "the unrelated extras are noise when an adapter says the fix"
    with pytest.raises(AdapterNotFound, match=r"tether\[crewai\]"):
        plugins.adapter_for({})  # no adapter has a hint for a dict: the extras are listed


def _probe_distribution(tmp_path: Path, requires: list[str]) -> importlib.metadata.Distribution:
    """A real installed distribution (a ``.dist-info`` folder) requiring ``requires`` and offering one tether
    entry point, ``probe``, for a plugin module with ``EXTRA = "probe"``."""
    info = tmp_path / "tetherprobe-1.0.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", "Name: tetherprobe", "Version: 1.0", "Provides-Extra: probe"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "entry_points.txt").write_text("[tether]\nprobe = tetherprobe_plugin\n")
    (tmp_path / "tetherprobe_plugin.py").write_text('EXTRA = "probe"\nREQUIRES = ("pluggy",)\n')
    return importlib.metadata.PathDistribution(info)


def test_an_extra_installed_at_an_unsupported_version_is_listed_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.plugin._requirements import unmet
    from tether.plugin.manager import _load_entry_point

    monkeypatch.syspath_prepend(str(tmp_path))
    installed = importlib.metadata.version("pluggy")
    dist = _probe_distribution(
        tmp_path,
        [
            'pluggy>=999; extra == "probe"',
            'pluggy>=1; extra == "probe"',
            'no-such-package-for-tether>=1; extra == "probe"',
            'pluggy>=999; extra == "other"',
            "pluggy>=1",
        ],
    )
    assert unmet(dist, "probe") == [
        f"pluggy {installed} (needs pluggy>=999)",
        "no-such-package-for-tether (not installed)",
    ]
    plugins = build(entry_points=False)
    (ep,) = [e for e in dist.entry_points if e.group == "tether"]
    _load_entry_point(plugins, ep)
    (entry,) = plugins.unavailable
    assert entry.name == "probe" and entry.hint == 'pip install "tether[probe]"'
    assert f"pluggy {installed} (needs pluggy>=999)" in entry.reason
    assert plugins.loaded() == []


def test_the_built_hook_implementations_register_adapters_and_enter_contexts() -> None:
    entered: list[str] = []

    @asynccontextmanager
    async def _quiet() -> AsyncIterator[None]:
        """Keep the framework quiet."""
        entered.append("quiet")
        yield

    def plugin_module() -> ModuleType:  # what a plugin's __init__.py builds in two lines
        module = ModuleType("tether_lists")
        module.register_adapters = adapters_hook(_ListAdapter, _AnyListAdapter)  # type: ignore[attr-defined]
        module.rollout_context = rollout_hook(_quiet)  # type: ignore[attr-defined]
        return module

    plugins, other = build(entry_points=False), build(entry_points=False)
    plugins.register(plugin_module(), name="lists")
    other.register(plugin_module(), name="lists")
    assert [a.name for a in plugins.adapters()] == ["lists", "any-list"]
    assert other.adapters()[0] is not plugins.adapters()[0], "each manager gets adapters of its own"
    assert rollout_hook(_quiet).__doc__ == "Keep the framework quiet."
    (manager,) = plugins.rollout_contexts(Rollout(rollout_id="ro-1", input="x", task_id="t"))

    async def enter() -> None:
        async with manager:
            assert entered == ["quiet"]

    asyncio.run(enter())


def test_a_built_hook_under_a_misspelled_name_is_rejected() -> None:
    module = ModuleType("tether_typo")
    module.register_adapter = adapters_hook(_ListAdapter)  # type: ignore[attr-defined]
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook\\(s\\) register_adapter"):
        build(entry_points=False).register(module, name="typo")
