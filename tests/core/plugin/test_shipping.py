"""A wrapped agent pickled for another process (``tether.RayRunners``' actors): the user's agent object goes by
reference to the module global that holds it (as a compiled LangGraph graph must: it does not survive being
rebuilt by value), an object no importable module holds goes by value, and a reference the other process
cannot import says how to ship the module."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest

from tether.plugin._shipping import ModuleGlobal, module_global, ship, unship
from tether.plugin.adapters import Adapter
from tether.plugin.wrap import WrappedAgent
from tether.policies import PolicyMap
from tether.types import Resources


class _Agent:
    """An agent object, with state that a copy would duplicate."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sentinel = object()


class _Adapter(Adapter):
    name = "shipping-test"

    def accepts(self, agent: Any) -> bool:
        return isinstance(agent, _Agent)

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        return agent.name


AGENT = _Agent("built at import")  # a module global, as a user's graph or team built at import is


def _reward(task: Any, output: Any) -> float:
    return 1.0


def _wrapped(agent: Any) -> WrappedAgent:
    return WrappedAgent(agent=agent, adapter=_Adapter(), reward=_reward, policies=PolicyMap.from_optimize(["a"]))


def test_an_agent_a_module_holds_travels_by_reference() -> None:
    assert module_global(AGENT) == ModuleGlobal(__name__, "AGENT")
    copy = pickle.loads(pickle.dumps(_wrapped(AGENT)))
    assert copy.agent is AGENT  # the very object: its sentinels are the ones its code compares with
    assert copy.reward is _reward and copy.optimize == frozenset({"a"})
    assert isinstance(copy.adapter, _Adapter)


def test_an_agent_built_in_a_function_travels_by_value() -> None:
    agent = _Agent("built here")
    assert module_global(agent) is None and ship(agent) is agent
    copy = pickle.loads(pickle.dumps(_wrapped(agent)))
    assert copy.agent is not agent and copy.agent.name == "built here"


def test_functions_and_main_scripts_are_left_to_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    assert module_global(_reward) is None  # pickle sends functions by reference itself
    main = type(sys)("__main__")
    main.SCRIPT_AGENT = script_agent = _Agent("in a script")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert module_global(script_agent) is None  # another process cannot import the trainer's __main__


def test_a_reference_the_other_process_cannot_import_says_how_to_ship_it() -> None:
    with pytest.raises(ImportError, match=r"tether_no_such_module\.graph.*py_modules"):
        unship(ModuleGlobal("tether_no_such_module", "graph"))
    with pytest.raises(ImportError, match="AttributeError"):
        unship(ModuleGlobal(__name__, "NO_SUCH_AGENT"))
