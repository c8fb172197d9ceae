"""The Trainer: runs a wrapped agent on tasks through the store, proxy and runners.

``dev`` runs tasks once with no training and returns every rollout's status, output, reward, spans and
transitions — for checking an agent's wiring. ``evaluate`` returns the metrics of such a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether._loop import run_sync
from tether.adapters import WrappedAgent
from tether.dev_report import DevReport, DevRollout
from tether.fit import FitResult
from tether.fit_progress import FitProgress as _Progress
from tether.models.base import ModelBackend
from tether.run_dir import RunDir
from tether.store import Store, open_store
from tether.transitions import CreditRule, build_transitions, unknown_optimize_names
from tether.types import LLMEndpoint, Mode, RolloutSpec, RolloutStatus, Task


@dataclass(slots=True)
class Trainer:
    """Configure once, then ``dev`` / ``evaluate`` (and ``fit`` once an algorithm is given).

    ``model``: ``"embedded"``, ``"embedded:<dir>"``, ``"hf:<path>"``, ``"vllm:<model>"``, an
    OpenAI-compatible URL, or a ``ModelBackend`` object (which stays open: its owner closes it).
    ``store``: a store URL (``memory:`` by default for ``dev``, ``runs/<name>/store.db`` for ``fit``).
    """

    model: str | ModelBackend = "embedded"
    algorithm: Any = None
    store: str | None = None
    n_runners: int = 4
    credit: CreditRule = "episode"
    tool_error_penalty: float = 0.0
    sampling: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None
    steps: int = 20
    eval_every: int = 5
    seed: int = 0
    name: str | None = None
    run_root: str = "runs"
    progress: bool = True

    def dev(
        self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | ModelBackend | None = None
    ) -> DevReport:
        """Run each task once, untrained, and report everything captured. Sync wrapper of ``adev``."""
        return run_sync(self.adev(agent, tasks, model=model))

    async def adev(
        self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | ModelBackend | None = None
    ) -> DevReport:
        if not isinstance(agent, WrappedAgent):
            raise TypeError("Trainer.dev takes the result of tether.wrap(agent, ...)")
        specs = [self._spec(task, Mode.VAL) for task in tasks]
        if not specs:
            raise ValueError("Trainer.dev needs at least one task")
        async with self._session(model or self.model) as (store, proxy):
            from tether.runner import Runner

            await store.add_resources(llm=LLMEndpoint(base_url=proxy.url, sampling=dict(self.sampling)))
            rollouts = await store.enqueue(specs)
            async with Runner(agent, store, proxy, batcher=proxy.batcher, concurrency=self.n_runners) as runner:
                await runner.run_until_idle()
            return await self._report(agent, store, [r.rollout_id for r in rollouts])

    def evaluate(
        self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | ModelBackend | None = None
    ) -> dict[str, float]:
        """Metrics of one untrained pass over ``tasks``: mean reward, success rate, calls per rollout."""
        return self.dev(agent, tasks, model=model).metrics()

    def fit(
        self, agent: WrappedAgent, train: Sequence[Any], val: Sequence[Any] | None = None, *, resume: bool = False
    ) -> FitResult:
        """Train ``agent`` on ``train`` with the algorithm, evaluating on ``val``; see ``tether.fit``.

        Ctrl-C stops after saving nothing half-written: the last checkpoint stays, and ``resume=True``
        continues from it.
        """
        try:
            return run_sync(self.afit(agent, train, val, resume=resume))
        except KeyboardInterrupt:
            run = RunDir.create(self.run_root, self.name or "run")
            print(f"interrupted: the last checkpoint is in {run.checkpoint_path}; fit(..., resume=True) continues")
            return FitResult(run_dir=run.path, history=run.history(), interrupted=True)

    async def afit(
        self, agent: WrappedAgent, train: Sequence[Any], val: Sequence[Any] | None = None, *, resume: bool = False
    ) -> FitResult:
        from tether.fit import FitLoop, as_task

        if self.algorithm is None:
            raise ValueError("Trainer.fit needs an algorithm: Trainer(algorithm=tether.GRPO(...))")
        if not isinstance(agent, WrappedAgent):
            raise TypeError("Trainer.fit takes the result of tether.wrap(agent, ...)")
        train_tasks = [as_task(t) for t in train]
        val_tasks = [as_task(t) for t in (val or [])]
        if not train_tasks:
            raise ValueError("Trainer.fit needs at least one training task")
        if resume and self.name is None:
            raise ValueError("resume=True needs the run's name: Trainer(name=...) as in the first run")
        run = RunDir.create(self.run_root, self.name or time.strftime("run-%Y%m%d-%H%M%S"))
        if not resume and run.metrics_path.exists():
            run.metrics_path.unlink()
        model = self.model
        if resume and run.state_path.exists():
            model = _checkpoint_model(self.model, run.checkpoint_path)
        async with self._session(model, store_url=self.store or run.store_url) as (store, proxy):
            from tether.runner import Runner

            search = getattr(self.algorithm, "optimize_prompts", None)
            if search is not None:  # APO: searches prompt templates, leaves the model as it is
                return await search(self, agent, store, proxy, run, train_tasks, val_tasks)
            backend = proxy.backend
            if not hasattr(backend, "policy"):
                raise ValueError(
                    f"{self.algorithm.__class__.__name__} trains a model tether holds in torch: use "
                    "model='embedded' or model='hf:<path>' (remote and vLLM backends train through verl)"
                )
            for status in (RolloutStatus.QUEUED, RolloutStatus.RUNNING):  # left by an interrupted run
                for stale in await store.list_rollouts(status=status):
                    await store.cancel_rollout(stale.rollout_id)
            loop = FitLoop(self, agent, backend, run)
            if resume:
                loop.restore()
            rng = random.Random(f"{self.seed}:{loop.step}")
            result = FitResult(run_dir=run.path)
            async with Runner(agent, store, proxy, batcher=proxy.batcher, concurrency=self.n_runners) as runner:
                with _Progress(self.steps, enabled=self.progress, start=loop.step) as bar:
                    if val_tasks and loop.step == 0:
                        await self._record(loop, run, await loop.evaluate(store, runner, proxy, val_tasks), bar)
                    while loop.step < self.steps:
                        await self._record(
                            loop, run, await loop.train_step(store, runner, proxy, train_tasks, rng), bar
                        )
                        if loop.step % self.eval_every == 0 or loop.step == self.steps:
                            if val_tasks:
                                await self._record(
                                    loop, run, await loop.evaluate(store, runner, proxy, val_tasks), bar
                                )
                            result.checkpoint = await asyncio.to_thread(loop.save)
            result.history = loop.history
            result.plot = run.plot(loop.history)
            return result

    async def _record(self, loop: Any, run: RunDir, record: dict[str, Any], bar: _Progress) -> None:
        loop.history.append(record)
        run.log(record)
        bar.update(record)

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
    async def _session(
        self, model: str | ModelBackend, store_url: str | None = None
    ) -> AsyncIterator[tuple[Store, Any]]:
        from tether.models import open_backend
        from tether.proxy import ProxyServer
        from tether.span_batcher import SpanBatcher

        store = open_store(store_url or self.store or "memory:")
        owned = not isinstance(model, ModelBackend)  # a backend object passed in stays the caller's
        backend = model if isinstance(model, ModelBackend) else open_backend(model)
        # issue 13 (helper C, interim until the Session owns it): one batcher for the proxy's and the
        # runner's spans, created here and closed after the proxy stops
        batcher = SpanBatcher(store)
        try:
            await backend.start()
            async with ProxyServer(backend, batcher=batcher) as proxy:
                yield store, proxy
        finally:
            await batcher.close()
            if owned:
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


def _checkpoint_model(model: str | ModelBackend, checkpoint: Path) -> str:
    """The ``model=`` string that loads a run's checkpoint with the same kind of backend."""
    if isinstance(model, ModelBackend):
        model = "embedded" if type(model).__name__ == "EmbeddedBackend" else "hf:"
    if model == "embedded" or model.startswith("embedded:"):
        return f"embedded:{checkpoint}"
    if model.startswith("hf:"):
        return f"hf:{checkpoint}"
    raise ValueError(f"cannot resume a run of model {model!r}: only embedded and hf: runs have checkpoints")
