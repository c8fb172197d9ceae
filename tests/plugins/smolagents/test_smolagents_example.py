"""smolagents' own multi-agent example (fixtures/inspect_multiagent_run.py: a ``CodeAgent`` manager whose Python
calls its managed ``ToolCallingAgent``, ``search_agent``) through ``Trainer.dev`` against the fake LLM via
tether's proxy: every call named (the unnamed manager after its module variable), tool calls and the managed
agent's call captured with arguments and results, the user's agents untouched, a streamed run, and
``optimize=`` marking only the named agent; ``tether plugins`` lists the plugin."""

from __future__ import annotations

import asyncio
from typing import Any

from multiagent_script import ANSWER, example, question, reply, reward

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.plugin.manager import get_plugins
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_smolagents import SmolagentsOutput


async def _dev(tasks: list[Any], **wrap_kwargs: Any) -> DevReport:
    agent = tether.wrap(example.manager_agent, reward=reward, **wrap_kwargs)
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
        finally:
            await backend.close()


def _check(report: DevReport) -> None:
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0, rollout.output
        names = [t.agent_name for t in rollout.transitions]
        assert names == ["manager_agent", "search_agent", "search_agent", "manager_agent"], names
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        task = rollout.rollout.input["task"]
        assert task in str(rollout.transitions[1].messages)  # the manager's code passed the task on
        tools = [
            (s.attributes[spans.TOOL_NAME], s.agent_name, s) for s in rollout.spans if s.kind == SpanKind.TOOL
        ]
        assert [(name, agent) for name, agent, _ in tools] == [
            ("web_search", "search_agent"),
            ("final_answer", "search_agent"),
            ("search_agent", "manager_agent"),
            ("final_answer", "manager_agent"),
        ]
        search, _, managed, final = (span for _, _, span in tools)
        assert search.attributes[spans.TOOL_ARGUMENTS] == {"query": "US GDP growth 2024"}
        assert "US real GDP grew 2.8% in 2024" in search.attributes[spans.TOOL_RESULT]
        assert managed.attributes[spans.TOOL_ARGUMENTS] == {"task": task}
        assert ANSWER in managed.attributes[spans.TOOL_RESULT]
        assert final.attributes[spans.TOOL_ARGUMENTS] == {"answer": ANSWER}
    assert not report.all_problems, report.all_problems


async def test_the_example_runs_under_trainer_dev_with_every_call_named() -> None:
    report = await _dev([question(i) for i in range(3)])
    _check(report)
    assert report.rollouts[0].rollout.output == {"text": ANSWER, "output": ANSWER, "state": "success"}
    # rollouts ran copies: the user's agents hold no run state
    for agent in (example.manager_agent, example.search_agent):
        assert agent.step_number == 0 and agent.task is None and not agent.memory.steps
    assert example.manager_agent.name is None  # named for tether only, not renamed


async def test_a_streamed_run() -> None:
    def stream(agent: Any, text: str) -> SmolagentsOutput:
        steps = list(agent.run(text, stream=True))
        return SmolagentsOutput(text=str(steps[-1].output), output=str(steps[-1].output))

    async def run(agent: Any, task: dict[str, Any]) -> SmolagentsOutput:
        return await asyncio.to_thread(stream, agent, task["task"])

    _check(await _dev([question(1), question(2)], run=run))


async def test_optimize_names_the_managed_agent() -> None:
    report = await _dev([question(0)], optimize=["search_agent"])
    (rollout,) = report.rollouts
    assert rollout.transitions
    assert [t.trainable for t in rollout.transitions] == [
        t.agent_name == "search_agent" for t in rollout.transitions
    ]
    assert any(t.trainable for t in rollout.transitions)


def test_tether_plugins_lists_it_with_its_install_hint() -> None:
    from click.testing import CliRunner

    from tether.cli import main

    plugins = get_plugins()
    assert plugins.adapter_for(example.manager_agent).extra == "smolagents"
    listing = CliRunner().invoke(main, ["plugins"])
    assert listing.exit_code == 0 and "smolagents" in listing.output, listing.output
