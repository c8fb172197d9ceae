"""The plugin manager: hooks, defaults, blocking, misspelled hooks, adapter choice, unavailable plugins."""

from __future__ import annotations

import re
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pluggy
import pytest

import tether
from tether import hookspecs
from tether.adapters import Adapter
from tether.plugins import AdapterNotFound, build, reset_plugins
from tether.types import Resources, Rollout

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture(autouse=True)
def _fresh_plugins() -> Any:
    """An isolated manager: tether's defaults only, no bundled plugins."""
    reset_plugins(build(entry_points=False))
    yield
    reset_plugins()


def test_hook_names_are_the_documented_contract() -> None:
    assert HOOKS == ["adapter_for", "register_adapters", "register_tracers", "rollout_context"]


def test_every_hookspec_has_a_readme_section_with_its_signature() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in HOOKS:
        assert re.search(rf"^#+ `{name}\(", readme, re.M), f"README lacks a section for hook {name}"
        params = list(
            getattr(hookspecs, name).__code__.co_varnames[: getattr(hookspecs, name).__code__.co_argcount]
        )
        assert f"`{name}({', '.join(params)})" in readme, f"README signature of {name} is out of date"


def test_defaults_are_registered_like_a_plugin() -> None:
    plugins = build()
    names = {p.name: p for p in plugins.loaded()}
    assert "tether.defaults" in names
    assert names["tether.defaults"].hooks == ["adapter_for"]
    assert names["tether.defaults"].source == "default"


def test_register_adapters_and_adapter_for() -> None:
    plugins = tether.get_plugins()
    adapter = _ListAdapter()
    plugins.register(_ListPlugin(adapter), name="lists")
    assert plugins.adapters() == [adapter]
    assert plugins.adapter_for([1, 2]) is adapter
    with pytest.raises(AdapterNotFound, match=r'no adapter accepts builtins\.dict; pass adapter="\.\.\."'):
        plugins.adapter_for({})


def test_two_adapters_claiming_one_agent_is_an_error_naming_adapter_kwarg() -> None:
    plugins = tether.get_plugins()
    plugins.register(_ListPlugin(_ListAdapter(), _AnyListAdapter()), name="lists")
    with pytest.raises(
        AdapterNotFound, match=r'several adapters accept list \(lists, any-list\).*adapter="lists"'
    ):
        tether.wrap([1])
    wrapped = tether.wrap([1], adapter="any-list")
    assert wrapped.adapter.name == "any-list"


def test_adapter_for_first_result_wins_over_default() -> None:
    chosen = _AnyListAdapter()

    class _Picker:
        @tether.hookimpl
        def adapter_for(self, agent: Any) -> Adapter | None:
            return chosen if agent == ["pick me"] else None

    plugins = tether.get_plugins()
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

    plugins = tether.get_plugins()
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

    plugins = tether.get_plugins()
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

    plugins = tether.get_plugins()
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook\\(s\\) register_adapter; the hooks are"):
        plugins.register(_Typo(), name="typo")
    assert "typo" not in {p.name for p in plugins.loaded()}


def test_disable_env_blocks_plugins_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DISABLE_PLUGINS", "lists, other")
    plugins = build()
    with pytest.raises(ValueError, match="blocked by TETHER_DISABLE_PLUGINS"):
        plugins.register(_ListPlugin(_ListAdapter()), name="lists")
    plugins.register(_ListPlugin(_ListAdapter()), name="fine")


def test_adapter_named_unknown_lists_loaded() -> None:
    with pytest.raises(AdapterNotFound, match="no adapter named 'nope'"):
        tether.wrap([1], adapter="nope")


def test_wrap_validates_arguments() -> None:
    tether.get_plugins().register(_ListPlugin(_ListAdapter()), name="lists")
    with pytest.raises(TypeError, match="reward must be a function"):
        tether.wrap([1], reward=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimize= takes sub-agent names"):
        tether.wrap([1], optimize=[""])
    wrapped = tether.wrap([1], optimize="writer")
    assert wrapped.optimize == frozenset({"writer"})
    assert wrapped.is_trainable("writer") and not wrapped.is_trainable("checker")


def test_import_tether_is_light() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import tether; dt = time.perf_counter() - t\n"
        "heavy = [m for m in ('torch', 'aiohttp', 'openai', 'langgraph', 'langchain_core', 'autogen_agentchat',"
        " 'agents', 'crewai', 'transformers', 'vllm') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
