"""ADK's own multi-agent sample (contributing/samples/hello_world_ma: a root_agent with ``sub_agents`` reached by
``transfer_to_agent``) runs under ``tether.wrap`` + ``Trainer.dev`` against the fake LLM through LiteLLM's
OpenAI route: every call named by the agent whose turn it is across both transfers, every tool call
(``transfer_to_agent`` included) captured with its arguments and result, ``optimize=`` marking only the named
agent, a raising tool recorded with its error, a Gemini model refused with the fix named, and the seam the
adapter relies on failing loudly when a release moves it."""

from __future__ import annotations

from typing import Any

import hello_world_ma as example
import pytest
from adk_script import reply
from google.adk.agents import Agent
from google.adk.models.lite_llm import LiteLlm
from google.adk.plugins.plugin_manager import PluginManager

import tether
from tether import spans
from tether.capture import redirect
from tether.capture.patching import SeamMissing
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_google_adk import GoogleADKAdapter, NotLiteLlm

TASK = "Roll a 10-sided die and check if it's prime."
AGENTS = ["root_agent", "roll_agent", "roll_agent", "prime_agent", "prime_agent"]


def _reward(task: Any, output: Any) -> float:
    return float("prime" in output["text"].lower() or "rolled" in output["text"])


async def _dev(
    agent: tether.WrappedAgent, tasks: list[Any], handler: Any = reply, bodies: list[Any] | None = None
) -> DevReport:
    def listen(body: Any, scope: Any, call_id: str) -> None:
        if bodies is not None:
            bodies.append(body)

    redirect.add_listener(listen)
    try:
        async with FakeLLM(handler=handler) as llm:
            backend = RemoteBackend(llm.base_url, return_token_ids=True)
            try:
                return await tether.Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
            finally:
                await backend.close()
    finally:
        redirect.remove_listener(listen)


async def test_the_sample_runs_with_every_call_named_across_transfers() -> None:
    bodies: list[Any] = []
    wrapped = tether.wrap(example.root_agent, reward=_reward, optimize=["roll_agent"])
    report = await _dev(wrapped, [TASK, "Roll a 6-sided die and check if it's prime."], bodies=bodies)
    assert len(bodies) == 10 and all(b["model"] == "gpt-4o-mini" for b in bodies)  # LiteLLM's openai/ route
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.output["agent"] == "prime_agent" and rollout.output["text"].startswith("Checked:")
        assert [t.agent_name for t in rollout.transitions] == AGENTS
        assert [t.trainable for t in rollout.transitions] == [name == "roll_agent" for name in AGENTS]
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        tools = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert [(s.name, s.agent_name) for s in tools] == [
            ("transfer_to_agent", "root_agent"),
            ("roll_die", "roll_agent"),
            ("transfer_to_agent", "roll_agent"),
            ("check_prime", "prime_agent"),
        ]
        sides = 10 if "10-sided" in rollout.rollout.input else 6
        roll = tools[1].attributes
        assert roll[spans.TOOL_ARGUMENTS] == {"sides": sides}
        assert 1 <= roll[spans.TOOL_RESULT] <= sides
        assert tools[2].attributes[spans.TOOL_ARGUMENTS] == {"agent_name": "prime_agent"}
        assert tools[3].attributes[spans.TOOL_ARGUMENTS] == {"nums": [roll[spans.TOOL_RESULT]]}
    assert not report.all_problems, report.all_problems


async def test_a_raising_tool_is_recorded_with_its_error() -> None:
    def explode(topic: str) -> str:
        """Useful for nothing."""
        raise ZeroDivisionError("division by zero")

    agent = Agent(name="exploder", model=LiteLlm(model="openai/m"), instruction="You explode.", tools=[explode])

    def script(request: dict[str, Any]) -> Reply:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return text("It did not explode.")
        return tool_call("explode", {"topic": "x"})

    (rollout,) = (await _dev(tether.wrap(agent, reward=lambda t, o: 1.0), ["Explode."], script)).rollouts
    # ADK re-raises a tool's exception (unless an on_tool_error_callback returns a result): the run fails
    assert rollout.status == RolloutStatus.FAILED and "division by zero" in str(rollout.error)
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "exploder" and tool.attributes[spans.TOOL_ARGUMENTS] == {"topic": "x"}
    assert "division by zero" in tool.attributes[spans.TOOL_ERROR]
    assert [t.agent_name for t in rollout.transitions] == ["exploder"]


async def test_a_gemini_model_is_refused_with_the_fix_named() -> None:
    gemini = Agent(name="gem", model="gemini-2.0-flash", instruction="Hi.")
    with pytest.raises(NotLiteLlm, match=r"'gem' uses the model 'gemini-2.0-flash'.*LiteLlm\(model=\"openai/"):
        GoogleADKAdapter().run_scope(gemini)
    # a sub-agent with a model string under a LiteLLM root, and a root without a model (ADK's default)
    mixed = Agent(name="boss", model=LiteLlm(model="openai/m"), sub_agents=[Agent(name="sub", model="gemini-x")])
    with pytest.raises(NotLiteLlm, match="'sub' uses the model 'gemini-x'"):
        GoogleADKAdapter().run_scope(mixed)
    with pytest.raises(NotLiteLlm, match="'bare' uses the model \"ADK's default model\""):
        GoogleADKAdapter().run_scope(Agent(name="bare", sub_agents=[Agent(name="kid")]))
    # sub-agents without a model inherit the root's LiteLlm: accepted
    GoogleADKAdapter().run_scope(
        Agent(name="root", model=LiteLlm(model="openai/m"), sub_agents=[Agent(name="kid", description="k")])
    )
    # through Trainer.dev the rollout fails with that error, before any call
    calls: list[Any] = []
    report = await _dev(
        tether.wrap(gemini, reward=lambda t, o: 1.0), ["Hi."], lambda r: calls.append(r) or text("")
    )
    (rollout,) = report.rollouts
    assert rollout.status != RolloutStatus.SUCCEEDED and "LiteLlm(model=" in str(rollout.error) and not calls


def test_a_moved_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Sink:
        def emit(self, *args: Any, **kwargs: Any) -> None:
            pass

    monkeypatch.delattr(PluginManager, "run_after_tool_callback")
    adapter = GoogleADKAdapter()
    with pytest.raises(SeamMissing, match="google-adk"):
        adapter.instrument(_Sink())
    assert not adapter.instrumented
