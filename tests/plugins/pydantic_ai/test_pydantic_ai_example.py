"""PydanticAI's own multi-agent example (fixtures/medical_agent_delegation.py, unchanged: a triage agent that
delegates to specialist agents and a senior doctor from its tools, all on ``'openai:gpt-5.2'``, i.e. the
Responses API) run through ``Trainer.dev`` against the fake LLM via tether's proxy: every call named by its
agent (the example names none: each gets its module variable's name), the delegation tools captured with
arguments and results, concurrent rollouts kept apart, and ``optimize=`` marking only the named agent."""

from __future__ import annotations

from typing import Any

import medical_script
from medical_script import AGENTS, example, handle_patient, reply, reward, task
from pydantic_ai.models.openai import OpenAIResponsesModel

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind


async def _dev(tasks: list[dict[str, Any]], **wrap_kwargs: Any) -> tuple[DevReport, list[str]]:
    agent = tether.wrap(example.triage_agent, reward=reward, run=handle_patient, **wrap_kwargs)
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend, n_runners=len(tasks)).adev(agent, tasks)
        finally:
            await backend.close()
    return report, [r.path for r in llm.requests]


async def test_the_example_runs_under_trainer_dev_with_every_call_named() -> None:
    assert isinstance(example.triage_agent.model, OpenAIResponsesModel)  # 'openai:' is the Responses API
    report, paths = await _dev([task(0), task(1), task(2)])
    assert paths and set(paths) == {"/v1/chat/completions"}  # the proxy serves /v1/responses from chat backends
    expected_sub = ["cardiology_agent", "senior_doctor_agent", "gp_agent"]
    expected_tool = ["consult_specialist", "consult_senior_doctor", "consult_specialist"]
    for rollout, sub, tool_name in zip(report.rollouts, expected_sub, expected_tool, strict=True):
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0, rollout.output
        assert [t.agent_name for t in rollout.transitions] == ["triage_agent", sub, "triage_agent"]
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        first = rollout.transitions[0]
        assert "triage clinician" in str(first.messages[0]["content"])
        assert medical_script.complaint(report.rollouts.index(rollout)) in str(first.messages)
        (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert tool.agent_name == "triage_agent" and tool.attributes[spans.TOOL_NAME] == tool_name
        arguments = tool.attributes[spans.TOOL_ARGUMENTS]
        result = tool.attributes[spans.TOOL_RESULT]
        if tool_name == "consult_specialist":
            assert arguments["specialty"] in ("cardiology", "general")
            assert result["final_status"] == "resolved_by_specialist"
            assert result["final_report"]["recommended_tests"] == ["ECG"]
        else:
            assert set(arguments) == {"reason_for_escalation", "initial_complaint"}
            assert result["treatment_plan"]["plan_summary"] == "admit and scan"
    assert not report.all_problems, report.all_problems
    for name in AGENTS - {"neurology_agent"}:  # the example's agents keep the names they were given
        assert getattr(example, name).name == name


async def test_optimize_names_one_specialist() -> None:
    report, _ = await _dev([task(0), task(2)], optimize=["cardiology_agent"])
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.transitions
        for t in rollout.transitions:
            assert t.trainable == (t.agent_name == "cardiology_agent")
    assert any(t.trainable for t in report.rollouts[0].transitions)
    assert not any(t.trainable for t in report.rollouts[1].transitions)


async def test_the_default_run_says_the_example_needs_its_deps() -> None:
    agent = tether.wrap(example.triage_agent, reward=reward)
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, [task(1)])  # the senior doctor tool reads ctx.deps
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.FAILED
    assert "DepsNeeded" in str(rollout.error) and "deps_type=PatientInfo" in str(rollout.error), rollout.error
