"""Agent Framework's own samples run unchanged under ``tether.wrap`` + ``Trainer.dev`` against the fake LLM:

- the agent-as-tool sample on ``OpenAIChatClient`` reaches the proxy on the Responses API (``/v1/responses``,
  the whole conversation each call: no ``previous_response_id``), its streamed ``as_tool()`` sub-agent's call
  named ``WriterAgent``, the tool captured with its arguments and result;
- the sequential workflow on ``OpenAIChatCompletionClient`` (Chat Completions) runs concurrent rollouts on
  copies of its one ``Workflow``, each call named by its agent, and ``optimize=`` marks only the named one;
- clients built at import time work in successive event loops (``Trainer.dev`` twice);
- the private seam the adapter relies on fails loudly when a release moves it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import agent_as_tool
import pytest
import sequential_agents
from agent_framework.openai import OpenAIChatClient, OpenAIChatCompletionClient
from agent_framework_openai._chat_client import RawOpenAIChatClient
from maf_script import reply, tagline

import tether
from tether import spans
from tether.capture import redirect
from tether.capture.patching import SeamMissing
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_agent_framework import AgentFrameworkAdapter


async def _dev(agent: tether.WrappedAgent, tasks: list[Any], bodies: list[Any] | None = None) -> DevReport:
    def listen(body: Any, scope: Any, call_id: str) -> None:
        if bodies is not None:
            bodies.append(body)

    redirect.add_listener(listen)
    try:
        async with FakeLLM(handler=reply) as llm:
            backend = RemoteBackend(llm.base_url, return_token_ids=True)
            try:
                return await tether.Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
            finally:
                await backend.close()
    finally:
        redirect.remove_listener(listen)


async def test_the_agent_as_tool_sample_runs_on_the_responses_api() -> None:
    assert type(agent_as_tool.client) is OpenAIChatClient  # the sample's client: Responses by default
    bodies: list[Any] = []
    wrapped = tether.wrap(agent_as_tool.coordinator, reward=lambda task, out: float("Fresh beans" in out["text"]))
    report = await _dev(wrapped, [agent_as_tool.query], bodies)
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.reward == 1.0
    assert rollout.output["text"] == f"Here is your tagline: {tagline(agent_as_tool.query)}"
    # every request was a Responses API call carrying the whole conversation (the proxy stores none)
    assert len(bodies) == 3 and all("input" in b and "messages" not in b for b in bodies), bodies
    assert not any("previous_response_id" in b for b in bodies)
    assert [t.agent_name for t in rollout.transitions] == ["CoordinatorAgent", "WriterAgent", "CoordinatorAgent"]
    assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
    last = rollout.transitions[-1]
    assert [m["role"] for m in last.messages] == ["system", "user", "assistant", "tool"]
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "CoordinatorAgent"
    assert tool.attributes[spans.TOOL_NAME] == "creative_writer"
    assert tool.attributes[spans.TOOL_ARGUMENTS] == {"request": agent_as_tool.query}
    assert tool.attributes[spans.TOOL_RESULT] == tagline(agent_as_tool.query)
    assert not report.all_problems, report.all_problems


async def test_the_sequential_workflow_runs_concurrently_on_chat_completions_with_its_agents_named() -> None:
    assert type(sequential_agents.client) is OpenAIChatCompletionClient
    bodies: list[Any] = []
    wrapped = tether.wrap(sequential_agents.workflow, reward=lambda task, out: 1.0, optimize=["reviewer"])
    tasks = [sequential_agents.prompt, "Write a tagline for a folding bike.", "Write a tagline for a cargo bike."]
    report = await _dev(wrapped, tasks, bodies)
    assert len(bodies) == 6 and all("messages" in b for b in bodies)
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert [t.agent_name for t in rollout.transitions] == ["writer", "reviewer"]
        assert [t.trainable for t in rollout.transitions] == [False, True]
        writer, reviewer = rollout.transitions
        assert writer.messages[-1] == {"role": "user", "content": rollout.rollout.input}
        # the reviewer sees the writer's answer: the shared conversation of its own rollout only
        assert writer.response["content"] in str(reviewer.messages)
        assert rollout.output["text"] == "Punchy and clear; keep it."
        assert [m["author"] for m in rollout.output["messages"]][-2:] == ["writer", "reviewer"]
    assert not report.all_problems, report.all_problems


def test_clients_built_at_import_work_in_successive_event_loops() -> None:
    wrapped = tether.wrap(agent_as_tool.coordinator, reward=lambda task, out: 1.0)
    for _ in range(2):  # two event loops, one after the other
        report = asyncio.run(_dev(wrapped, [agent_as_tool.query]))
        (rollout,) = report.rollouts
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    # the user's own AsyncOpenAI was never handed to a rollout: it is still the one the sample built, unused
    assert "client" not in vars(RawOpenAIChatClient)
    assert agent_as_tool.client.client is vars(agent_as_tool.client)["client"]


def test_a_moved_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(RawOpenAIChatClient, "_get_conversation_id")
    adapter = AgentFrameworkAdapter()

    class _Sink:
        def emit(self, *args: Any, **kwargs: Any) -> None:
            pass

    with pytest.raises(SeamMissing, match="agent-framework-openai"):
        adapter.instrument(_Sink())
    assert not adapter.instrumented
