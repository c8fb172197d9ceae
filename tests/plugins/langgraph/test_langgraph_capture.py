"""What the langgraph plugin captures beyond the shared suite: tool errors (handled by ToolNode or not), the
graph name, node names on the proxy's own spans, the adapter's llm spans matching the proxy's requests,
concurrent rollouts with interleaved calls, how tasks are fed to a graph, LangSmith switched off in rollouts,
and a run against the embedded model."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import langgraph_calc_graph
import openai
import pytest
import pytest_asyncio
from langchain_core.tracers.langchain import wait_for_all_tracers
from langgraph.graph import StateGraph
from langgraph_script import reply, task

import tether
from tether import spans as schema
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import Resources, RolloutStatus, Span, SpanKind
from tether_langgraph import LangGraphAdapter

NODES_CALLING_THE_MODEL = {"planner", "agent", "finish"}


async def _dev(graph: Any, tasks: list[Any], *, delay_s: float = 0.0, **wrap_kwargs: Any) -> DevReport:
    async with FakeLLM(handler=lambda request: reply(request, delay_s=delay_s)) as llm:
        agent = tether.wrap(graph, reward=lambda task, output: 1.0, **wrap_kwargs)
        backend = RemoteBackend(llm.base_url, return_token_ids=True)  # the fake LLM returns token ids
        try:
            return await Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
        finally:
            await backend.close()


def _tools(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.kind == SpanKind.TOOL]


def _adapter_llm(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.kind == SpanKind.LLM and not is_proxy_llm_span(s)]


async def test_tool_error_turned_into_a_message_is_captured_and_the_rollout_completes() -> None:
    report = await _dev(langgraph_calc_graph.graph, [{"question": "What is 6 / 0?"}])
    (dev,) = report.rollouts
    assert dev.status == RolloutStatus.SUCCEEDED, dev.error
    (span,) = _tools(dev.spans)
    assert span.agent_name == "tools"
    assert span.attributes[schema.TOOL_NAME] == "divide"
    assert span.attributes[schema.TOOL_ARGUMENTS] == {"a": 6, "b": 0}
    assert span.attributes[schema.TOOL_ERROR].startswith("ZeroDivisionError")
    assert schema.TOOL_RESULT not in span.attributes
    # the graph carried on: the solver saw the error as a tool message and the finisher answered
    assert any(
        m.get("role") == "tool" and "ZeroDivisionError" in str(m.get("content"))
        for t in dev.transitions
        for m in t.messages
    )
    # the final state is stored as JSON: message objects become their dicts
    output = dev.rollout.output
    assert output["answer"].startswith("Final answer: The result is Error")
    assert all(isinstance(m, dict) for m in output["messages"])


async def test_tool_error_that_ends_the_graph_fails_the_rollout_cleanly() -> None:
    report = await _dev(langgraph_calc_graph.strict_graph, [{"question": "What is 6 / 0?"}, task(1)])
    failed, ok = report.rollouts
    assert failed.status == RolloutStatus.FAILED
    assert "ZeroDivisionError" in (failed.error or "")
    (span,) = _tools(failed.spans)
    assert span.attributes[schema.TOOL_ERROR].startswith("ZeroDivisionError") and span.agent_name == "tools"
    assert {t.agent_name for t in failed.transitions} == {"planner", "agent"}  # calls before the failure
    assert ok.status == RolloutStatus.SUCCEEDED, ok.error  # the other rollout is unaffected


async def test_graph_name_node_names_and_matching_requests() -> None:
    report = await _dev(langgraph_calc_graph.graph, [task(2)])
    (dev,) = report.rollouts
    assert all(t.prompt_token_ids and t.response_token_ids for t in dev.transitions)
    graphs = [s for s in dev.spans if s.kind == SpanKind.OTHER and s.name == "graph"]
    assert [s.attributes["graph.name"] for s in graphs] == ["calculator"]
    # the proxy's spans are named by the X-Tether-Agent header (the resolver), not filled in afterwards
    proxy = [s for s in dev.spans if is_proxy_llm_span(s)]
    assert [s.agent_name for s in proxy] == ["planner", "agent", "agent", "finish"]
    # the adapter's own llm spans carry the very request the proxy received, and the response
    own = _adapter_llm(dev.spans)
    assert sorted(s.agent_name or "" for s in own) == sorted(s.agent_name or "" for s in proxy)
    for span in own:
        (match,) = [
            p for p in proxy if p.attributes["request"]["messages"] == span.attributes[schema.REQUEST_MESSAGES]
        ]
        assert match.agent_name == span.agent_name
        assert span.attributes[schema.RESPONSE]["role"] == "assistant"
        assert span.attributes[schema.REQUEST_MODEL] == "gpt-4o-mini"
    (tool,) = _tools(dev.spans)
    assert tool.attributes[schema.TOOL_RESULT] == "9.0" and tool.attributes[schema.TOOL_CALL_ID]


async def test_two_interleaved_rollouts_keep_their_own_spans() -> None:
    # every reply is delayed so both rollouts are mid-graph at once
    report = await _dev(langgraph_calc_graph.graph, [task(3), task(4)], delay_s=0.05)
    assert len(report.rollouts) == 2
    starts = sorted(s.start_time for dev in report.rollouts for s in dev.spans if is_proxy_llm_span(s))
    for dev in report.rollouts:
        assert dev.status == RolloutStatus.SUCCEEDED, dev.error
        question = dev.rollout.input["question"]
        own = _adapter_llm(dev.spans)
        assert len(own) == 4
        assert all(question in str(s.attributes[schema.REQUEST_MESSAGES]) for s in own)
        (tool,) = _tools(dev.spans)
        assert tool.attributes[schema.TOOL_ARGUMENTS] == {"a": int(question.split()[2]), "b": 7}
        assert len([s for s in dev.spans if s.name == "graph"]) == 1
    first, second = ([s for s in dev.spans if is_proxy_llm_span(s)] for dev in report.rollouts)
    assert first[0].start_time < second[-1].start_time and second[0].start_time < first[-1].start_time, starts


async def test_a_string_task_becomes_a_user_message() -> None:
    report = await _dev(langgraph_calc_graph.chatbot, ["hello there"])
    (dev,) = report.rollouts
    assert dev.status == RolloutStatus.SUCCEEDED, dev.error
    (t,) = dev.transitions
    assert t.agent_name == "chat" and t.messages == [{"role": "user", "content": "hello there"}]
    assert t.response["content"] == "Echo: hello there"


async def test_other_task_types_are_a_clear_error() -> None:
    with pytest.raises(TypeError, match="run="):
        await LangGraphAdapter().run(langgraph_calc_graph.chatbot, ["not", "a", "state"], Resources(version=0))


def test_accepts_compiled_graphs_only() -> None:
    adapter = LangGraphAdapter()
    assert adapter.accepts(langgraph_calc_graph.graph)
    assert adapter.accepts(langgraph_calc_graph.chatbot)
    assert not adapter.accepts(StateGraph(langgraph_calc_graph.State))  # not compiled
    assert not adapter.accepts(langgraph_calc_graph.llm)
    assert not adapter.accepts({"question": "x"})


def test_plugin_import_does_not_import_the_framework() -> None:
    code = (
        "import sys, tether_langgraph\n"
        "assert not tether_langgraph.LangGraphAdapter().accepts(object())\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'langgraph', 'langsmith')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest_asyncio.fixture(loop_scope="session")
async def langsmith_server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[str]]:
    """LangSmith tracing switched on by the environment, uploading to a local server that records requests."""
    from aiohttp import web
    from langsmith import run_trees, utils

    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        seen.append(f"{request.method} {request.path}")
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    utils.get_env_var.cache_clear()  # LangSmith caches the environment it read
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "not-a-key")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(run_trees, "_CLIENT", None)  # a fresh client for this endpoint
    try:
        yield seen
    finally:
        await asyncio.to_thread(wait_for_all_tracers)
        monkeypatch.undo()
        utils.get_env_var.cache_clear()
        await runner.cleanup()


async def test_langsmith_tracing_is_off_inside_rollouts(langsmith_server: list[str]) -> None:
    def uploads() -> list[str]:
        return [r for r in langsmith_server if r.startswith("POST /runs")]

    # outside a rollout the user's setting applies: even a failed run (nothing listens at the graph's own
    # base_url) is uploaded
    with pytest.raises(openai.APIConnectionError):
        await langgraph_calc_graph.chatbot.ainvoke({"messages": [("user", "hi")]})
    await asyncio.to_thread(wait_for_all_tracers)
    assert uploads(), langsmith_server
    langsmith_server.clear()

    report = await _dev(langgraph_calc_graph.graph, [task(1)])
    assert report.rollouts[0].status == RolloutStatus.SUCCEEDED, report.rollouts[0].error
    await asyncio.to_thread(wait_for_all_tracers)
    assert uploads() == [], langsmith_server


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("tether.models.embedded") is None,
    reason="the embedded backend needs tether[embedded] (torch 2.13.0)",
)
async def test_embedded_model_run_captures_token_ids_and_node_names() -> None:
    try:
        from tether.models.embedded import EmbeddedBackend  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"tether.models.embedded.EmbeddedBackend is not importable yet: {exc}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    agent = tether.wrap(langgraph_calc_graph.graph, reward=lambda task, output: 0.0)
    report = await Trainer(model="embedded", n_runners=1, sampling={"max_tokens": 16}).adev(agent, [task(5)])
    (dev,) = report.rollouts
    # untrained: only the capture is checked, not the answer (a garbled tool call may end the graph early)
    assert dev.transitions, str(dev)
    for t in dev.transitions:
        assert t.prompt_token_ids and t.response_token_ids
        assert t.agent_name in NODES_CALLING_THE_MODEL
    assert dev.transitions[0].agent_name == "planner"
    assert all(t.trainable for t in dev.transitions)
