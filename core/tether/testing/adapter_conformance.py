"""The adapter conformance suite: what every framework plugin must do, as pytest tests to subclass.

A plugin's test module subclasses ``AdapterConformance`` and fills in the agent and how the fake LLM should
answer it; the inherited tests then run the real framework through ``Trainer.dev`` against tether's
``FakeLLM`` (via the proxy) and check capture, agent names, tool spans, isolation of concurrent rollouts and
selective optimization::

    class TestMyFramework(AdapterConformance):
        adapter_name = "myfw"
        expected_agents = {"planner", "solver"}
        tool_name = "add"

        def make_agent(self):            # the user's agent, built as its module builds it
            import my_agent_module
            return my_agent_module.agent

        def reply(self, request):       # the fake LLM's answer to one chat request
            ...

        def make_task(self, i):          # the i-th task input
            return {"question": f"what is {i} + 1?"}

        def custom_run(self):            # a run= as a user writes it, calling the object it is given
            async def run(agent, task):
                return await agent.run(task)
            return run

Tasks are answered by ``reply`` from the request alone, so concurrent rollouts get consistent scripts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ClassVar

from tether import spans
from tether.plugin.wrap import RunFn, WrappedAgent, wrap
from tether.testing.fake_llm import FakeLLM, Reply
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind


class AdapterConformance:
    adapter_name: ClassVar[str]
    expected_agents: ClassVar[set[str]]
    tool_name: ClassVar[str]
    #: a module of the framework that ``accepts`` must not need to import (checked in ``sys.modules``)
    framework_module: ClassVar[str]

    def make_agent(self) -> Any:
        raise NotImplementedError

    def reply(self, request: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def make_task(self, i: int) -> Any:
        raise NotImplementedError

    def custom_run(self) -> RunFn:
        """A ``run=`` for ``tether.wrap`` as a user of the framework writes it: it runs the object it is given
        directly (``await team.reset(); return await team.run(task=...)``, ``crew.kickoff(inputs=...)``), so
        it fails or mixes rollouts if concurrent rollouts are handed one shared object."""
        raise NotImplementedError("define custom_run() to return a run= function that runs the agent it gets")

    def wrap_agent(self, agent: Any, **kwargs: Any) -> WrappedAgent:
        """How the tests wrap the agent (override to pass ``run=`` or a reward)."""
        return wrap(agent, reward=lambda task, output: 1.0, **kwargs)

    # -- helpers ------------------------------------------------------------------------------------------

    async def _dev(
        self, n_tasks: int, *, handler: Callable[[dict[str, Any]], Reply] | None = None, **wrap_kwargs: Any
    ) -> DevReport:
        from tether.models.remote import RemoteBackend

        async with FakeLLM(handler=handler or self.reply) as llm:
            agent = self.wrap_agent(self.make_agent(), **wrap_kwargs)
            backend = RemoteBackend(llm.base_url, return_token_ids=True)  # the fake LLM returns token ids
            try:
                trainer = Trainer(model=backend, n_runners=max(2, n_tasks))
                return await trainer.adev(agent, [self.make_task(i) for i in range(n_tasks)])
            finally:
                await backend.close()

    # -- the suite ----------------------------------------------------------------------------------------

    def test_accepts_its_agents_only(self) -> None:
        agent = self.make_agent()
        wrapped = self.wrap_agent(agent)
        assert wrapped.adapter.name == self.adapter_name
        assert self.framework_module in sys.modules
        assert not wrapped.adapter.accepts(object())
        assert not wrapped.adapter.accepts(42)

    def test_instrument_is_idempotent_and_uninstrument_exact(self) -> None:
        adapter = self.wrap_agent(self.make_agent()).adapter

        class _Sink:
            def emit(self, *args: Any, **kwargs: Any) -> None:
                pass

        sink = _Sink()
        before = self.instrumentation_state()
        adapter.instrument(sink)
        during = self.instrumentation_state()
        adapter.instrument(sink)
        assert self.instrumentation_state() == during, "instrument() twice must change nothing"
        adapter.uninstrument()
        assert self.instrumentation_state() == before, "uninstrument() must restore the state exactly"
        adapter.uninstrument()
        assert self.instrumentation_state() == before

    def instrumentation_state(self) -> Any:
        """A comparable snapshot of what ``instrument`` changes (patched functions, registered handlers)."""
        raise NotImplementedError

    async def test_captures_llm_and_tool_calls_with_agent_names(self) -> None:
        report = await self._dev(1)
        (rollout,) = report.rollouts
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.transitions, str(rollout)
        names = {t.agent_name for t in rollout.transitions}
        assert names <= self.expected_agents and names, f"agent names on LLM calls: {names}"
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        tools = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert any(s.attributes.get(spans.TOOL_NAME) == self.tool_name for s in tools), str(rollout)
        for span in tools:
            assert spans.TOOL_ARGUMENTS in span.attributes
            assert span.agent_name in self.expected_agents, f"tool span agent {span.agent_name!r}"
        assert not report.all_problems, report.all_problems

    async def test_the_runner_alone_holds_the_redirect(self) -> None:
        # the endpoint redirect is held once per rollout, by the runner: while a call is in flight it has
        # exactly one holder (an adapter's run_scope or instrument holding it too would make it 2 or 3), the
        # calls still reach tether's proxy (their spans carry token ids), and nothing stays patched afterwards
        from openai._base_client import BaseClient

        from tether.capture import redirect

        original = BaseClient.__dict__["_build_request"]
        holders: list[int] = []

        def counting(request: dict[str, Any]) -> Reply:
            holders.append(redirect.install_count())
            return self.reply(request)

        for run in (None, self.custom_run()):  # the adapter's own run, and a user's run=
            holders.clear()
            report = await self._dev(1, handler=counting, run=run)
            (rollout,) = report.rollouts
            assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
            assert rollout.transitions and all(t.prompt_token_ids for t in rollout.transitions), str(rollout)
            assert holders and set(holders) == {1}, f"redirect holders during the calls: {holders}"
            assert redirect.install_count() == 0, "the redirect is still held after the run"
            assert BaseClient.__dict__["_build_request"] is original, "the openai SDK is still patched"

    async def test_concurrent_rollouts_do_not_mix(self) -> None:
        _check_isolated(await self._dev(4), 4)

    async def test_custom_run_gets_a_rollout_copy_under_concurrent_rollouts(self) -> None:
        # a run= receives the same per-rollout copy the adapter's own run uses (Adapter.rollout_copy), never
        # the user's one object: four rollouts at once must neither collide nor mix
        report = await self._dev(4, run=self.custom_run())
        _check_isolated(report, 4)
        for dev in report.rollouts:
            assert {t.agent_name for t in dev.transitions} <= self.expected_agents
            tools = [s for s in dev.spans if s.kind == SpanKind.TOOL]
            assert any(s.attributes.get(spans.TOOL_NAME) == self.tool_name for s in tools), str(dev)

    async def test_optimize_marks_only_named_agents_trainable(self) -> None:
        chosen = sorted(self.expected_agents)[0]
        report = await self._dev(1, optimize=[chosen])
        (rollout,) = report.rollouts
        assert rollout.transitions
        for t in rollout.transitions:
            assert t.trainable == (t.agent_name == chosen)

    async def test_unknown_optimize_name_is_reported(self) -> None:
        report = await self._dev(1, optimize=["no_such_agent"])
        assert any("unknown sub-agent 'no_such_agent'" in p for p in report.problems), report.problems


def _check_isolated(report: DevReport, n: int) -> None:
    """Every rollout succeeded, and each one's calls are about its own task and carry its own rollout id."""
    assert len(report.rollouts) == n
    for dev in report.rollouts:
        assert dev.status == RolloutStatus.SUCCEEDED, dev.error
        assert dev.transitions
        task_text = _text_of(dev.rollout.input)
        for t in dev.transitions:
            user_text = " ".join(_text_of(m.get("content")) for m in t.messages if m.get("role") == "user")
            assert task_text in user_text, f"rollout for {task_text!r} captured a call about {user_text!r}"
        assert {s.rollout_id for s in dev.spans} == {dev.rollout.rollout_id}


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(_text_of(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text_of(v) for v in value)
    return "" if value is None else str(value)


__all__ = ["AdapterConformance"]
