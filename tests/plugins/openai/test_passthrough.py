"""An LLM judge inside a rollout keeps its own endpoint (``tether.passthrough``): the agent's client is
redirected to the model being trained while the judge's, built at import time, still reaches the judge's
server; the judge's call is recorded for inspection and never becomes a transition."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from openai._base_client import AsyncAPIClient, SyncAPIClient

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text
from tether.types import RolloutStatus, SpanKind

HERE = Path(__file__).parent
CONTEXT_HEADERS = ("X-Tether-Call-Id", "X-Tether-Agent")


def _policy(request: dict[str, Any]) -> Reply:
    return text(f"policy says {request['messages'][-1]['content']}")


def _judge(request: dict[str, Any]) -> Reply:
    return text("CORRECT")


@pytest.fixture
def judge_llm() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_judge) as llm:  # its own thread: a sync judge may block the rollouts' loop
        yield llm


@pytest.fixture
def agent(judge_llm: FakeLLM) -> ModuleType:
    """The judged agent, imported fresh with the judge's URL: its clients are built at import."""
    os.environ["JUDGE_BASE_URL"] = judge_llm.base_url
    spec = importlib.util.spec_from_file_location(f"judged_agent_{judge_llm.port}", HERE / "judged_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _dev(wrapped: Any, tasks: list[str], *, judge_is_policy: bool = False) -> Any:
    responses = (SyncAPIClient.__dict__["_process_response"], AsyncAPIClient.__dict__["_process_response"])
    async with FakeLLM(handler=_policy) as policy:
        backend = RemoteBackend(policy.base_url, return_token_ids=True)
        try:
            report = await tether.Trainer(model=backend, n_runners=2).adev(wrapped, tasks)
        finally:
            await backend.close()
    # the SDK's response method is wrapped only while the redirect is held, and restored exactly
    assert (SyncAPIClient.__dict__["_process_response"], AsyncAPIClient.__dict__["_process_response"]) == responses
    judged_by_policy = any(r["model"] == "judge-model" for r in policy.chat_requests)
    assert judged_by_policy == judge_is_policy, "where the judge's calls went"
    return report


def _check(report: Any, judge_llm: FakeLLM, tasks: list[str], agent_name: str | None) -> None:
    assert sorted(
        r["messages"][0]["content"].split("Question: ")[1].split(" Answer")[0] for r in judge_llm.chat_requests
    ) == sorted(tasks)
    for request in judge_llm.requests:
        assert not any(h in request.headers for h in CONTEXT_HEADERS), "the judge's request was rewritten"
        assert request.headers["Authorization"] == "Bearer sk-judge"
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0
        (policy_call,) = rollout.transitions  # the judge's call is never a transition
        assert policy_call.messages == [{"role": "user", "content": rollout.rollout.input}]
        (judged,) = [s for s in rollout.spans if s.name == spans.PASSTHROUGH_CALL]
        assert judged.kind == SpanKind.LLM and judged.attributes[spans.PASSTHROUGH] is True
        assert judged.attributes["url"] == judge_llm.base_url + "/chat/completions"
        assert judged.attributes["status"] == 200
        assert rollout.rollout.input in judged.attributes["request"]["messages"][0]["content"]
        assert judged.attributes["response"]["choices"][0]["message"]["content"] == "CORRECT"
        assert judged.agent_name == agent_name
        assert "passthrough to" in str(rollout)


TASKS = ["capital of France?", "capital of Peru?"]


async def test_a_judge_client_passed_to_wrap_keeps_its_own_url(agent: ModuleType, judge_llm: FakeLLM) -> None:
    wrapped = tether.wrap(agent.answer, reward=lambda t, o: o["score"], passthrough=[agent.judge])
    _check(await _dev(wrapped, TASKS), judge_llm, TASKS, "answer")


async def test_a_passthrough_region_keeps_the_judge_on_its_own_url(agent: ModuleType, judge_llm: FakeLLM) -> None:
    wrapped = tether.wrap(agent.answer_in_region, reward=lambda t, o: o["score"])
    _check(await _dev(wrapped, TASKS), judge_llm, TASKS, "answer_in_region")


async def test_async_clients_in_a_passthrough_region(agent: ModuleType, judge_llm: FakeLLM) -> None:
    wrapped = tether.wrap(agent.answer_async, reward=lambda t, o: o["score"])
    _check(await _dev(wrapped, TASKS), judge_llm, TASKS, "answer_async")


async def test_a_judge_in_the_reward_function_keeps_its_own_url(agent: ModuleType, judge_llm: FakeLLM) -> None:
    wrapped = tether.wrap(agent._ask, reward=lambda task, output: agent.grade(task, output))
    report = await _dev(wrapped, TASKS)
    _check(report, judge_llm, TASKS, None)


async def test_an_unmarked_judge_is_the_policys_call(agent: ModuleType, judge_llm: FakeLLM) -> None:
    # without passthrough the judge's request is redirected like any other: the trained model grades itself
    report = await _dev(tether.wrap(agent.answer, reward=lambda t, o: 1.0), TASKS[:1], judge_is_policy=True)
    (rollout,) = report.rollouts
    assert len(rollout.transitions) == 2 and "Grade this answer" in str(rollout.transitions[1].messages)
    assert judge_llm.chat_requests == []


def test_passthrough_takes_openai_clients_or_objects_holding_one(agent: ModuleType) -> None:
    assert tether.wrap(agent.answer, passthrough=[agent.judge.chat.completions]).passthrough
    with pytest.raises(TypeError, match="passthrough= takes openai SDK clients"):
        tether.wrap(agent.answer, passthrough=["http://judge/v1"])


def test_outside_a_rollout_passthrough_changes_nothing(agent: ModuleType, judge_llm: FakeLLM) -> None:
    with tether.passthrough():
        assert agent.grade("q", "a") == 1.0
    assert judge_llm.chat_requests[-1]["model"] == "judge-model"
