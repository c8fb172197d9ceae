"""Instrumentation details of the langgraph adapter: the configure hook is unlinked exactly, or made inert
when LangChain's hook list cannot be reached; events outside a rollout are ignored; the node-name resolver
reads LangGraph's config context; an adapter pickled (for Ray actors) after instrumenting leaves its hook
behind."""

from __future__ import annotations

import pickle
import uuid
from typing import Any

import pytest
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers import context as tracers_context

from tether import spans
from tether.capture.context import RolloutScope, current_agent_name, rollout_scope
from tether_langgraph import LangGraphAdapter, node_name


class _Sink:
    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []

    def emit(self, kind: Any, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        self.spans.append((kind, name, attributes, kwargs.get("agent_name")))


def _ours(adapter: LangGraphAdapter) -> list[Any]:
    return [entry for entry in tracers_context._configure_hooks if entry[0] is adapter._hook.var]


_SCOPE = RolloutScope("ro-1", "at-1", "http://127.0.0.1:9/v1")


def test_hook_registered_once_and_unlinked_exactly() -> None:
    adapter, sink = LangGraphAdapter(), _Sink()
    adapter.instrument(sink)
    adapter.instrument(_Sink())  # another sink: swapped in, not registered again
    assert len(_ours(adapter)) == 1
    adapter.uninstrument()
    assert _ours(adapter) == []
    adapter.instrument(sink)
    assert len(_ours(adapter)) == 1
    adapter.uninstrument()
    assert _ours(adapter) == []


def test_an_adapter_pickled_after_instrumenting_leaves_its_hook_behind() -> None:
    adapter, sink = LangGraphAdapter(), _Sink()
    adapter.instrument(sink)
    try:
        copy = pickle.loads(pickle.dumps(adapter))  # a context variable cannot be pickled at all
    finally:
        adapter.uninstrument()
    assert not copy.instrumented and copy._hook.var is None and not copy._hook.registered
    copy.instrument(sink)  # where it runs: its own handler and hook
    try:
        assert len(_ours(copy)) == 1 and copy._hook.var is not adapter._hook.var
    finally:
        copy.uninstrument()
    assert _ours(copy) == []


def test_hook_made_inert_when_langchain_hook_list_is_out_of_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter, sink = LangGraphAdapter(), _Sink()
    adapter.instrument(sink)
    handler = adapter._hook.handler
    assert handler is not None
    monkeypatch.setattr(tracers_context, "_configure_hooks", None)  # as if a release moved the list
    adapter.uninstrument()
    monkeypatch.undo()
    try:
        assert len(_ours(adapter)) == 1  # still registered...
        with rollout_scope(_SCOPE):  # ...but drops events, even inside a rollout
            handler.on_chain_start({}, {}, run_id=uuid.uuid4(), name="g")
        assert sink.spans == []
        adapter.instrument(sink)  # reused, not registered a second time
        assert len(_ours(adapter)) == 1
        with rollout_scope(_SCOPE):
            handler.on_chain_start({}, {}, run_id=uuid.uuid4(), name="g")
        assert [s[2] for s in sink.spans] == [{"graph.name": "g"}]
    finally:
        adapter.uninstrument()
    assert _ours(adapter) == []


def test_events_outside_a_rollout_are_ignored_and_tool_runs_give_one_span() -> None:
    adapter, sink = LangGraphAdapter(), _Sink()
    adapter.instrument(sink)
    handler = adapter._hook.handler
    assert handler is not None
    try:
        run_id = uuid.uuid4()
        handler.on_tool_start({"name": "add"}, "{}", run_id=run_id, inputs={"a": 1})
        handler.on_tool_end("2", run_id=run_id)
        assert sink.spans == []
        with rollout_scope(_SCOPE):
            run_id = uuid.uuid4()
            handler.on_tool_start(
                {"name": "add"}, "{}", run_id=run_id, inputs={"a": 1}, metadata={"langgraph_node": "tools"}
            )
            handler.on_tool_error(ValueError("bad"), run_id=run_id)
            handler.on_tool_end("late", run_id=run_id)  # a second end of the same run adds nothing
        ((kind, name, attributes, agent),) = sink.spans
        assert (kind, name, agent) == ("tool", "add", "tools")
        assert attributes[spans.TOOL_ERROR] == "ValueError: bad" and attributes[spans.TOOL_ARGUMENTS] == {"a": 1}
    finally:
        adapter.uninstrument()


def test_node_name_resolver_reads_langgraph_config() -> None:
    adapter = LangGraphAdapter()
    assert node_name() is None
    token = var_child_runnable_config.set({"metadata": {"langgraph_node": "planner"}})
    try:
        assert node_name() == "planner"
        assert current_agent_name() is None  # not registered yet
        adapter.instrument(_Sink())
        assert current_agent_name() == "planner"
        adapter.uninstrument()
        assert current_agent_name() is None
    finally:
        var_child_runnable_config.reset(token)
