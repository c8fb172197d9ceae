"""AutoGen agents and teams run through ``Trainer.dev`` against the fake LLM (via tether's proxy): agent names
in a team, failing tools, concurrent rollouts, streamed model calls, what reward functions receive, the
user's objects left untouched, several event loops in one process, and the embedded model."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import autogen_calc_agent
import autogen_calc_team
import pytest
from autogen_agentchat.base import TaskResult
from autogen_script import reply, task

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_autogen import AutoGenOutput

pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")


async def _dev(agent: Any, tasks: list[Any], handler: Any = reply, **trainer: Any) -> DevReport:
    async with FakeLLM(handler=handler) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend, n_runners=4, **trainer).adev(agent, tasks)
        finally:
            await backend.close()


def _proxy_calls(rollout: Any) -> list[Any]:
    return [s for s in rollout.spans if s.kind == SpanKind.LLM and s.name == spans.LLM_CALL]


async def test_team_calls_carry_each_agents_name() -> None:
    report = await _dev(tether.wrap(autogen_calc_team.team, reward=lambda t, o: 1.0), [task(1)])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    # the solver calls the tool, reflects on its result, then the checker approves
    assert [t.agent_name for t in rollout.transitions] == ["solver", "solver", "checker"], str(rollout)
    assert [s.agent_name for s in _proxy_calls(rollout)] == ["solver", "solver", "checker"]
    systems = [t.messages[0]["content"] for t in rollout.transitions]
    assert "solver" in systems[0] and "solver" in systems[1] and "checker" in systems[2]
    own = [s for s in rollout.spans if s.kind == SpanKind.LLM and s.name == "autogen.llm_call"]
    assert [s.agent_name for s in own] == ["solver", "solver", "checker"]
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "solver"
    assert tool.attributes == {
        spans.TOOL_NAME: "calculator",
        spans.TOOL_ARGUMENTS: {"expression": "1 + 4"},
        spans.TOOL_CALL_ID: rollout.transitions[0].response["tool_calls"][0]["id"],
        spans.TOOL_RESULT: "5",
    }
    assert rollout.output["text"] == "Checked. APPROVED"
    assert rollout.output["stop_reason"] and "APPROVED" in rollout.output["stop_reason"]


async def test_a_tool_that_raises_yields_a_tool_span_with_the_error() -> None:
    agent = tether.wrap(autogen_calc_agent.calculator_agent, reward=lambda t, o: 1.0)
    report = await _dev(agent, ["What is 1/0?"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "calculator_agent"
    assert tool.attributes[spans.TOOL_NAME] == "calculator"
    assert tool.attributes[spans.TOOL_ARGUMENTS] == {"expression": "1/0"}
    assert "division by zero" in tool.attributes[spans.TOOL_ERROR]
    assert spans.TOOL_RESULT not in tool.attributes
    # the error reached the model as the tool's result
    assert rollout.transitions[1].messages[-1]["role"] == "tool"
    assert "division by zero" in rollout.transitions[1].messages[-1]["content"]
    assert "division by zero" in str(rollout)
    # in time, the failed tool sits between the call that asked for it and the next call
    first, second = _proxy_calls(rollout)
    assert first.end_time <= tool.start_time <= tool.end_time <= second.start_time


async def test_arguments_that_are_not_json_yield_a_tool_error_with_the_raw_arguments() -> None:
    agent = tether.wrap(autogen_calc_agent.calculator_agent, reward=lambda t, o: 1.0)
    report = await _dev(agent, ["raw:{not json"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.attributes[spans.TOOL_ARGUMENTS] == "{not json"
    assert tool.attributes[spans.TOOL_ERROR].startswith("Error:")
    assert tool.agent_name == "calculator_agent"


def _slow(request: dict[str, Any]) -> Reply:
    return dataclasses.replace(reply(request), delay_s=0.03)  # keeps both rollouts in flight together


async def test_two_concurrent_team_rollouts_do_not_mix() -> None:
    agent = tether.wrap(autogen_calc_team.team, reward=lambda t, o: 1.0)
    report = await _dev(agent, [task(10), task(20)], handler=_slow)
    by_task = {r.rollout.input: r for r in report.rollouts}
    for question, expression, answer in [(task(10), "10 + 13", "23"), (task(20), "20 + 23", "43")]:
        rollout = by_task[question]
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert [t.agent_name for t in rollout.transitions] == ["solver", "solver", "checker"]
        for t in rollout.transitions:
            users = [m["content"] for m in t.messages if m["role"] == "user"]
            assert users[0] == question, users
        (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert tool.attributes[spans.TOOL_ARGUMENTS] == {"expression": expression}
        assert tool.attributes[spans.TOOL_RESULT] == answer
        assert {s.rollout_id for s in rollout.spans} == {rollout.rollout.rollout_id}
        texts = [m["content"] for m in rollout.output["messages"] if m["type"] == "TextMessage"]
        assert f"The answer is {answer}" in texts


async def test_streamed_model_calls_are_captured() -> None:
    agent = tether.wrap(autogen_calc_agent.streaming_agent, reward=lambda t, o: 1.0)
    report = await _dev(agent, [task(2)])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert [t.agent_name for t in rollout.transitions] == ["streaming_agent", "streaming_agent"]
    assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
    own = [s for s in rollout.spans if s.kind == SpanKind.LLM and s.name == "autogen.llm_call"]
    assert len(own) == 2 and all(s.attributes.get("streamed") for s in own)
    assert own[0].attributes[spans.REQUEST_MESSAGES][-1] == {"role": "user", "name": "user", "content": task(2)}
    assert own[1].attributes[spans.RESPONSE]["content"] == "The answer is 7"
    assert rollout.output["text"] == "The answer is 7"


async def test_reward_receives_the_final_text_and_the_task_result() -> None:
    seen: list[Any] = []

    def reward(question: Any, output: Any) -> float:
        seen.append(output)
        return float(output["text"].strip().endswith(str(eval(question["question"][8:-1]))))

    agent = tether.wrap(autogen_calc_agent.calculator_agent, reward=reward)
    report = await _dev(agent, [{"question": "What is 2 + 3?", "answer": 5}])
    (rollout,) = report.rollouts
    assert rollout.reward == 1.0, str(rollout)
    (output,) = seen
    assert isinstance(output, AutoGenOutput) and str(output) == "The answer is 5"
    assert isinstance(output.task_result, TaskResult)
    assert [m["type"] for m in output["messages"]] == [
        "TextMessage",
        "ToolCallRequestEvent",
        "ToolCallExecutionEvent",
        "TextMessage",
    ]
    assert rollout.output == dict(output)  # stored as plain JSON


async def test_the_users_objects_are_not_run_or_changed() -> None:
    agent = autogen_calc_agent.calculator_agent
    client_before = autogen_calc_agent.model_client._client
    report = await _dev(tether.wrap(autogen_calc_team.team, reward=lambda t, o: 1.0), [task(3)])
    assert report.rollouts[0].status == RolloutStatus.SUCCEEDED
    report = await _dev(tether.wrap(agent, reward=lambda t, o: 1.0), [task(4), task(5)])
    assert all(r.status == RolloutStatus.SUCCEEDED for r in report.rollouts)
    assert await agent.model_context.get_messages() == []
    for participant in autogen_calc_team.team._participants:
        assert await participant.model_context.get_messages() == []
    assert not autogen_calc_team.team._is_running and not autogen_calc_team.team._initialized
    assert autogen_calc_agent.model_client._client is client_before


def test_runs_in_successive_event_loops() -> None:
    # Trainer.dev runs its own event loop each time; the import-time client must work in every one
    agent = tether.wrap(autogen_calc_agent.calculator_agent, reward=lambda t, o: 1.0)
    with FakeLLM(handler=reply) as llm:
        for i in range(3):
            report = Trainer(model=llm.base_url).dev(agent, [task(i)])
            (rollout,) = report.rollouts
            assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
            assert rollout.output["text"] == f"The answer is {2 * i + 3}"


_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")


@pytest.mark.skipif(not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"')
def test_embedded_model_calls_are_captured_with_token_ids_and_agent_names() -> None:
    from tether.models.embedded import EmbeddedBackend

    # untrained: only capture is checked, not the answers; short replies keep the test quick
    agent = tether.wrap(autogen_calc_team.team, reward=lambda t, o: 0.0)
    report = Trainer(model=EmbeddedBackend(default_max_tokens=24), n_runners=2).dev(agent, [task(1), task(2)])
    assert len(report.rollouts) == 2
    for rollout in report.rollouts:
        assert rollout.transitions, str(rollout)
        assert rollout.transitions[0].agent_name == "solver"
        assert {t.agent_name for t in rollout.transitions} <= {"solver", "checker"}
        for t in rollout.transitions:
            assert t.prompt_token_ids and t.response_token_ids
            assert t.logprobs is not None and len(t.logprobs) == len(t.response_token_ids)
            assert t.messages[-1]["role"] in ("user", "tool")
        assert {s.rollout_id for s in rollout.spans} == {rollout.rollout.rollout_id}
