"""PydanticAI agents on ``OpenAIChatModel`` (Chat Completions) through ``Trainer.dev``: the default run, a
``run=`` on ``run_stream`` (the boss's requests streamed, the delegated calculator's not), ``run_sync`` from a
worker thread, agents built before ``wrap`` with an unreachable base URL redirected, the user's agent left as
it was, and ``tether plugins`` listing the plugin."""

from __future__ import annotations

import asyncio
from typing import Any

import calc_agents
from calc_agents import boss, question, reply, reward

import tether
from tether import spans
from tether.capture import redirect
from tether.models.remote import RemoteBackend
from tether.plugin.manager import get_plugins
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_pydantic_ai import PydanticAIOutput, summarize


async def _dev(tasks: list[Any], **wrap_kwargs: Any) -> tuple[DevReport, list[dict[str, Any]]]:
    """The report, and the bodies of the requests the agents sent (as the redirect saw them)."""
    agent = tether.wrap(boss, reward=reward, **wrap_kwargs)
    sent: list[dict[str, Any]] = []

    def listen(body: Any, scope: Any, call_id: str) -> None:
        sent.append(body)

    redirect.add_listener(listen)
    try:
        async with FakeLLM(handler=reply) as llm:
            backend = RemoteBackend(llm.base_url, return_token_ids=True)
            try:
                report = await Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
            finally:
                await backend.close()
    finally:
        redirect.remove_listener(listen)
    return report, sent


def _check(report: DevReport, n: int) -> None:
    assert len(report.rollouts) == n
    for rollout in report.rollouts:
        i = rollout.rollout.input["answer"] - 7
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0, rollout.output
        assert [t.agent_name for t in rollout.transitions] == ["boss", "calculator", "calculator", "boss"]
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        assert f"What is {i} + 7?" in str(rollout.transitions[1].messages)
        tools = {s.attributes[spans.TOOL_NAME]: s for s in rollout.spans if s.kind == SpanKind.TOOL}
        assert set(tools) == {"ask_calculator", "add"}
        assert tools["add"].agent_name == "calculator" and tools["ask_calculator"].agent_name == "boss"
        assert tools["add"].attributes[spans.TOOL_ARGUMENTS] == {"a": i, "b": 7}
        assert tools["add"].attributes[spans.TOOL_RESULT] == i + 7
        assert tools["ask_calculator"].attributes[spans.TOOL_RESULT] == f"The answer is {i + 7}"
    assert not report.all_problems, report.all_problems


async def test_the_default_run_on_chat_completions() -> None:
    report, bodies = await _dev([question(i) for i in range(3)])
    _check(report, 3)
    output = report.rollouts[0].rollout.output
    assert output == {"text": "The answer is The answer is 7", "output": "The answer is The answer is 7"}
    assert boss.name == "boss" and str(calc_agents.model.client.base_url) == "http://127.0.0.1:9/v1/"
    assert not any(b.get("stream") for b in bodies)


async def test_run_stream() -> None:
    async def streamed(agent: Any, task: dict[str, Any]) -> PydanticAIOutput:
        async with agent.run_stream(task["question"]) as result:
            text = await result.get_output()
        return PydanticAIOutput(text=text, output=text)

    report, bodies = await _dev([question(1), question(2)], run=streamed)
    _check(report, 2)
    boss_streams = {bool(b.get("stream")) for b in bodies if calc_agents.BOSS_PROMPT in str(b["messages"])}
    calculator_streams = {
        bool(b.get("stream")) for b in bodies if calc_agents.CALCULATOR_PROMPT in str(b["messages"])
    }
    assert boss_streams == {True} and calculator_streams == {False}  # the calculator runs with run() in the tool


async def test_run_sync_in_a_worker_thread() -> None:
    def sync_run(agent: Any, task: dict[str, Any]) -> PydanticAIOutput:
        return summarize(agent.run_sync(task["question"]))

    async def run(agent: Any, task: dict[str, Any]) -> PydanticAIOutput:
        return await asyncio.to_thread(sync_run, agent, task)

    report, _ = await _dev([question(3)], run=run)
    _check(report, 1)


def test_tether_plugins_lists_it_with_its_install_hint() -> None:
    from click.testing import CliRunner

    from tether.cli import main

    plugins = get_plugins()
    assert "pydantic_ai" in [a.name for a in plugins.adapters()]
    assert plugins.adapter_for(boss).extra == "pydantic-ai"
    listing = CliRunner().invoke(main, ["plugins"])
    assert listing.exit_code == 0 and "pydantic_ai" in listing.output, listing.output
