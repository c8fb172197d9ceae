"""The Trainer: runs a wrapped agent on tasks through the store, proxy and runners.

``dev`` runs tasks once with no training and returns every rollout's status, output, reward, spans and
transitions — for checking an agent's wiring. ``evaluate`` returns the metrics of such a run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.adapters import WrappedAgent
from tether.dev_report import DevReport, DevRollout
from tether.store import Store, open_store
from tether.transitions import CreditRule, build_transitions, unknown_optimize_names
from tether.types import LLMEndpoint, Mode, RolloutSpec, RolloutStatus, Task


@dataclass(slots=True)
class Trainer:
    """Configure once, then ``dev`` / ``evaluate`` (and ``fit`` once an algorithm is given).

    ``model``: ``"embedded"``, ``"embedded:<dir>"``, ``"hf:<path>"``, ``"vllm:<model>"`` or an
    OpenAI-compatible URL. ``store``: a store URL (``memory:`` by default for ``dev``).
    """

    model: str = "embedded"
    algorithm: Any = None
    store: str | None = None
    n_runners: int = 4
    credit: CreditRule = "episode"
    tool_error_penalty: float = 0.0
    sampling: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None

    def dev(self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | None = None) -> DevReport:
        """Run each task once, untrained, and report everything captured. Sync wrapper of ``adev``."""
        return asyncio.run(self.adev(agent, tasks, model=model))

    async def adev(self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | None = None) -> DevReport:
        if not isinstance(agent, WrappedAgent):
            raise TypeError("Trainer.dev takes the result of tether.wrap(agent, ...)")
        specs = [self._spec(task, Mode.VAL) for task in tasks]
        if not specs:
            raise ValueError("Trainer.dev needs at least one task")
        async with self._session(model or self.model) as (store, proxy):
            from tether.runner import Runner

            await store.add_resources(llm=LLMEndpoint(base_url=proxy.url, sampling=dict(self.sampling)))
            rollouts = await store.enqueue(specs)
            async with Runner(agent, store, proxy, concurrency=self.n_runners) as runner:
                await runner.run_until_idle()
            return await self._report(agent, store, [r.rollout_id for r in rollouts])

    def evaluate(self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | None = None) -> dict[str, float]:
        """Metrics of one untrained pass over ``tasks``: mean reward, success rate, calls per rollout."""
        return self.dev(agent, tasks, model=model).metrics()

    def _spec(self, task: Any, mode: Mode) -> RolloutSpec:
        if isinstance(task, Task):
            return RolloutSpec(
                input=task.input,
                task_id=task.task_id,
                mode=mode,
                metadata=dict(task.metadata),
                max_attempts=self.max_attempts,
                timeout_s=self.timeout_s,
            )
        return RolloutSpec(input=task, mode=mode, max_attempts=self.max_attempts, timeout_s=self.timeout_s)

    @contextlib.asynccontextmanager
    async def _session(self, model: str) -> AsyncIterator[tuple[Store, Any]]:
        from tether.models import open_backend
        from tether.proxy import ProxyServer

        store = open_store(self.store or "memory:")
        backend = open_backend(model)
        try:
            await backend.start()
            async with ProxyServer(store, backend) as proxy:
                yield store, proxy
        finally:
            await backend.close()
            await store.close()

    async def _report(self, agent: WrappedAgent, store: Store, rollout_ids: Sequence[str]) -> DevReport:
        report = DevReport()
        for rollout in await store.list_rollouts(rollout_ids=rollout_ids):
            attempts = await store.get_attempts(rollout.rollout_id)
            spans = await store.get_spans(attempts[-1].attempt_id) if attempts else []
            built = build_transitions(
                rollout,
                spans,
                optimize=agent.optimize,
                credit=self.credit,
                tool_error_penalty=self.tool_error_penalty,
            )
            if rollout.status == RolloutStatus.SUCCEEDED and rollout.reward is None:
                built.problems.append(
                    f"rollout {rollout.rollout_id} has no reward: pass reward= to tether.wrap or call "
                    "tether.emit_reward in the agent"
                )
            report.rollouts.append(
                DevRollout(
                    rollout=rollout,
                    spans=spans,
                    transitions=built.transitions,
                    problems=built.problems,
                    attempts=len(attempts),
                )
            )
            report.agent_names |= built.agent_names
        unknown = unknown_optimize_names(agent.optimize, report.agent_names)
        if unknown:
            report.problems.append(unknown)
        return report
