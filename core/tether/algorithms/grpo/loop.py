"""GRPO's training loop: rollouts → transitions → policy update → new weights, with evaluation, checkpoints,
metrics and a progress bar. ``GRPO.fit`` runs it on the ``Session`` that ``Trainer.fit`` opens; a joint run
(``tether.algorithms.joint``) runs the same loop with its prompt search in ``LoopHooks``.

Each step samples ``tasks_per_step`` training tasks, runs ``group_size`` rollouts of each (sampled at the
algorithm's temperature), builds transitions, gives each its advantage under the trainer's credit rule
(``tether.training.signal.credit``) and updates the model in place; the proxy serves the new weights to the next
rollouts. Validation runs before training, every
``eval_every`` steps and at the end, greedy (temperature 0), and sampled (temperature 1) before the first step
and after the last (every time with ``Trainer(eval_sampled="every")``). A checkpoint
(weights, optimizer, step) is written after every evaluation; ``resume=True`` continues from it.

Each step's record says what it trained (``trained``: transitions with a non-zero advantage, flat groups out of
groups, failed rollouts and their commonest error) and, when it trained nothing, why (``idle``). After
``stop_after_idle_steps`` such steps in a row the run stops with a ``FitError`` naming the cause and the fix.

torch is imported only to write and read checkpoints, so this module loads without it.
"""

from __future__ import annotations

import abc
import asyncio
import random
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tether.algorithms.base import Algorithm
from tether.algorithms.evaluation import carried_eval, evaluate
from tether.algorithms.grpo.policies import trained_policies, update_policies
from tether.models.base import TrainableBackend
from tether.training.engine import memory
from tether.training.engine.session import Session
from tether.training.run.health import FitError, idle_reason, top_errors
from tether.training.run.preflight import PreflightGroup
from tether.training.run.progress import FitProgress, sampling_bar, updating
from tether.training.run.result import FitResult
from tether.training.run.run_dir import RunDir
from tether.training.signal.batch import Batch
from tether.training.signal.credit import CreditStats
from tether.training.signal.kv_metrics import kv_metrics, kv_stats
from tether.training.signal.transitions import check_optimize_names
from tether.types import Mode, PromptTemplate, Task, Transition

T = TypeVar("T")


class PolicyUpdate(Algorithm):
    """An algorithm this loop trains (``tether.algorithms.grpo.GRPO``): ``group_size`` rollouts of each of
    ``tasks_per_step`` tasks per step at ``temperature``, then ``update`` on their credited transitions (for each
    of ``policies``, None: the agent's). ``fit`` is the loop; ``fit_with(..., hooks)`` the loop with another
    algorithm's part in it (a joint run's prompt search)."""

    group_size: int
    tasks_per_step: int
    temperature: float
    policies: Sequence[str] | None

    @abc.abstractmethod
    def update(
        self,
        model: Any,
        transitions: Sequence[Transition],
        *,
        pad_token_id: int = 0,
        weights_version: int | None = None,
        policy: str | None = None,
    ) -> dict[str, float]:
        """One policy update on ``transitions``; returns its metrics."""

    def trains_on(self, batch: Batch) -> list[Transition]:
        """The transitions of a training batch that ``update`` gets: those the Session credited with a non-zero
        advantage (``tether.Distill``, whose signal is a teacher's, takes every trainable call)."""
        return batch.trained

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The optimizer state a checkpoint keeps."""

    @abc.abstractmethod
    def load_state_dict(self, model: Any, state: dict[str, Any], policy: str | None = None) -> None:
        """Restore the optimizer of ``policy`` from a checkpoint's ``state``."""

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """Train ``session.backend`` (a ``TrainableBackend``) for ``session.settings.steps`` steps."""
        return await fit(self, session, train, val)

    async def fit_with(
        self, session: Session, train: Sequence[Task], val: Sequence[Task], hooks: LoopHooks
    ) -> FitResult:
        """``fit``, with ``hooks`` called around its steps (``LoopHooks``)."""
        return await fit(self, session, train, val, hooks)

    def check_session(self, session: Session) -> None:
        """What ``fit`` would refuse (a backend it cannot train, ``policies=`` the agent lacks), said before
        any rollout runs: ``Trainer.fit`` calls it before its preflight."""
        trainable_backend(self, session)
        trained_policies(self.policies, session.agent.policies)

    @property
    def preflight_group(self) -> PreflightGroup | None:
        return PreflightGroup(self.group_size, self.temperature)


class LoopHooks:
    """What another algorithm adds to the loop's run (a joint run's prompt search, ``tether.algorithms.joint``);
    every hook does nothing by default. ``start`` runs after a resumed run is restored and before the first
    evaluation (it may set ``loop.prompts``, the templates the rollouts run under), ``after_step`` after each
    training step is recorded, ``after_checkpoint`` after each checkpoint, ``finish`` on the finished run's
    result (what ``fit`` returns), and ``close`` always, last."""

    async def start(self, loop: Loop) -> None:
        """Before the first evaluation."""

    async def after_step(self, loop: Loop) -> None:
        """After each training step."""

    async def after_checkpoint(self, loop: Loop) -> None:
        """After each checkpoint is written."""

    async def finish(self, loop: Loop, result: FitResult) -> FitResult:
        """The run's result, once every step ran."""
        del loop
        return result

    async def close(self) -> None:
        """Release what ``start`` took; runs whether the run finished or failed."""


def trainable_backend(algorithm: object, session: Session) -> TrainableBackend:
    """``session.backend`` when it can be trained, else a ``ValueError`` naming the models that can."""
    backend = session.backend
    if not isinstance(backend, TrainableBackend):
        raise ValueError(
            f"{type(algorithm).__name__} trains a model tether holds in torch: use "
            "model='embedded', model='hf:<path>' or model='vllm:<path>' with lora=tether.LoRA(...) (a remote API "
            "cannot be trained)"
        )
    return backend


async def fit(
    algorithm: PolicyUpdate,
    session: Session,
    train: Sequence[Task],
    val: Sequence[Task],
    hooks: LoopHooks | None = None,
) -> FitResult:
    """Train ``session.backend`` for ``session.settings.steps`` steps (the rest of them when resuming), with
    ``hooks`` (``LoopHooks``) called around them."""
    hooks = hooks or LoopHooks()
    backend = trainable_backend(algorithm, session)
    run = session.require_run(type(algorithm).__name__)
    settings = session.settings
    await session.cancel_unfinished()  # left by an interrupted run
    loop = Loop(algorithm, session, backend, run)
    loop.policies = trained_policies(algorithm.policies, session.agent.policies)
    if session.resume and not await loop.restore():
        run.drop_from(0)  # no checkpoint of this run: its steps so far are redone, and logged once
    rng = random.Random(f"{settings.seed}:{loop.step}")
    result = FitResult(run_dir=run.path)
    try:
        await hooks.start(loop)
        with FitProgress(settings.steps, enabled=settings.progress, start=loop.step) as bar:
            if val and loop.step == 0:
                carried = carried_eval(run)
                if carried is not None:  # a previous stage (a warm start) just evaluated these weights
                    loop.history.append(carried)
                else:
                    loop.record(await loop.evaluate(val, bar, sampled=settings.eval_sampled != "never"), bar)
            while loop.step < settings.steps:
                step = await loop.train_step(train, rng)
                loop.record(step, bar)
                settled = loop.check_idle(step, settings.stop_after_idle_steps)
                await hooks.after_step(loop)
                if settled or loop.step % settings.eval_every == 0 or loop.step == settings.steps:
                    if val:
                        last = bool(settled) or loop.step == settings.steps
                        sampled = settings.eval_sampled == "every" or (last and settings.eval_sampled == "ends")
                        loop.record(await loop.evaluate(val, bar, sampled=sampled), bar)
                    result.checkpoint = await loop.in_update_thread(loop.save)
                    await hooks.after_checkpoint(loop)
                if settled:  # it trained before and nothing more comes: stop here, evaluated and saved
                    loop.record({"kind": "stop", "step": loop.step, "reason": settled}, bar)
                    result.stopped = settled
                    warnings.warn_explicit(settled, UserWarning, "tether.fit", 0)
                    break
        result.history = loop.history
        result.plot = run.plot(loop.history)
        return await hooks.finish(loop, result)
    finally:
        loop.close()
        await hooks.close()


class Loop:
    """The state of one run: the step, the history, and how to save and restore them. ``prompts`` are the
    templates its rollouts run under (None: the latest); ``last_batch`` is the last training batch."""

    def __init__(self, algorithm: PolicyUpdate, session: Session, backend: TrainableBackend, run: RunDir) -> None:
        self.algorithm = algorithm
        self.session = session
        self.backend = backend
        self.run = run
        self.history: list[dict[str, Any]] = []
        self.step = 0
        self.prompts: dict[str, PromptTemplate] | None = None
        self.last_batch: Batch | None = None
        self._updates = memory.UpdateThread()  # one thread runs every update (flat memory)
        #: the policies updated one by one (each its own weights); None: the one shared policy
        self.policies: list[str] | None = None
        self._noted: set[str] = set()
        self.idle_steps = 0  # consecutive steps that trained nothing

    async def in_update_thread(self, work: Callable[[], T]) -> T:
        """``work()`` on the loop's update thread, then freed memory handed back (``memory.release``)."""
        return await self._updates.run(work)

    def close(self) -> None:
        self._updates.close()

    def _note(self, notes: list[str]) -> None:
        """Warn once per run of each credit rule that could not apply."""
        for note in notes:
            if note not in self._noted:
                self._noted.add(note)
                warnings.warn(note, stacklevel=3)

    async def evaluate(self, val: Sequence[Task], bar: FitProgress, *, sampled: bool) -> dict[str, Any]:
        """The evaluation at this step (``tether.algorithms.evaluation``), greedy and, with ``sampled``, at T=1,
        with its own progress bar."""
        passes = 2 if sampled else 1
        progress = bar.evaluation(self.step, passes * len(val))
        try:
            return await evaluate(
                self.session, val, step=self.step, prompts=self.prompts, sampled=sampled, progress=progress
            )
        finally:
            progress.close()

    def record(self, record: dict[str, Any], bar: FitProgress) -> None:
        self.history.append(record)
        self.run.log(record)
        bar.update(record)

    async def train_step(self, train: Sequence[Task], rng: random.Random) -> dict[str, Any]:
        algo = self.algorithm
        tasks = rng.sample(list(train), min(algo.tasks_per_step, len(train)))
        kv_before = kv_stats(self.backend)
        sampling = sampling_bar(self.step + 1, len(tasks) * algo.group_size)
        try:
            batch = await self.session.run_batch(
                tasks,
                algo.group_size,
                {"temperature": algo.temperature},
                Mode.TRAIN,
                prompts=self.prompts,
                progress=sampling,
            )
        finally:
            if sampling is not None:
                sampling.close()
        self.last_batch = batch
        if self.step == 0:
            self._check_wiring(batch)
        trainable, stats = algo.trains_on(batch), batch.credit  # (credited once by the Session, under its rule)
        self._note(stats.notes)
        pad = self.backend.pad_token_id

        def _update() -> dict[str, float]:
            if self.policies is not None:  # one update per policy, each on its own weights
                return update_policies(algo.update, self.backend, trainable, self.policies, pad)
            with self.backend.policy() as model:  # the version being updated: bumped when the block ends
                return algo.update(
                    model, trainable, pad_token_id=pad, weights_version=self.backend.weights_version
                )

        async with updating(self.step + 1):  # (in a pipe: a line while a slow update runs)
            update = await self.in_update_thread(_update)
        self.step += 1
        return {
            **_what_trained(batch, stats, trainable, update),
            "kind": "train",
            "step": self.step,
            "reward": batch.mean_reward,
            "tool_rate": batch.tool_rate,
            "rollouts": len(batch.results),
            "failed": batch.failed,
            **stats.metrics(),
            **{f"reward/{target}": value for target, value in batch.target_rewards.items()},
            **batch.group_metrics,  # a group reward's: the judge's tokens, MajorityVote's agreement
            "transitions": len(batch.transitions),
            "rollouts_per_s": len(batch.results) / max(batch.seconds, 1e-9),
            **update,
            **kv_metrics(kv_before, kv_stats(self.backend)),
            **({"rss_mb": rss} if (rss := memory.rss_mb()) is not None else {}),
        }

    def check_idle(self, record: dict[str, Any], limit: int | None) -> str | None:
        """Count a step that trained nothing. After ``limit`` of them in a row: ``FitError`` with their reason
        when no step of the run trained anything (a broken reward or wiring: nothing to keep), else why the run
        stops early (it learned until its groups stopped differing: the caller evaluates and saves it)."""
        if record.get("trained", 0):
            self.idle_steps = 0
            return None
        self.idle_steps += 1
        if limit is None or self.idle_steps < limit:
            return None
        last = f"the last, step {self.run.run_step(record['step'])}"
        what = f"{self.idle_steps} steps in a row trained nothing ({last}): {record.get('idle')}"
        regardless = "Trainer(stop_after_idle_steps=None) trains on regardless"
        trained = sum(1 for h in self.history if h.get("kind") == "train" and h.get("trained"))
        before = self.run.trained_before()  # a warm start (or an earlier stage) trained: its result is kept
        if not trained and not before:
            raise FitError(f"{what}. Metrics: {self.run.metrics_path}; {regardless}")
        after = f"after {trained} steps that did train" if trained else "after an earlier stage trained"
        return (
            f"stopped early after step {self.run.run_step(record['step'])}: {what}, {after}. The "
            f"policy has settled where these rewards no longer tell its samples apart (a higher temperature or "
            f"group_size, or a reward that grades finer, gives it more to learn); {regardless}"
        )

    def _check_wiring(self, batch: Batch) -> None:
        session = self.session
        if not session.names_checked:  # (the preflight checks them, unless it was skipped)
            session.names_checked = True
            check = check_optimize_names(session.agent.optimize, batch.agent_names, len(batch.results))
            if check is not None and check.nothing_trained:
                raise ValueError(f"{check.unknown}; nothing would be trained")
            if check is not None:  # a sub-agent on a path the first rollouts did not take (a conditional node)
                warnings.warn_explicit(f"the first training batch: {check.sampled}", UserWarning, "tether.fit", 0)
        if batch.results and not batch.transitions:
            problems = "; ".join(dict.fromkeys(batch.problems)) or "no LLM call was captured"
            raise RuntimeError(f"the first training rollouts produced no transitions: {problems}")

    # -- checkpoints ----------------------------------------------------------------------------------------

    def save(self) -> Path:
        import torch

        def write(directory: Path) -> None:
            self.backend.save(str(directory))
            torch.save(self.algorithm.state_dict(), directory / "optimizer.pt")

        return self.run.save_checkpoint(write, {"step": self.step})

    async def restore(self) -> bool:
        """Load the run's last checkpoint (weights, optimizer, step) and its history up to that step."""
        state = self.run.load_state()
        if state is None:
            return False
        import torch

        await asyncio.to_thread(self.backend.load_weights, str(self.run.checkpoint_path))
        self.step = int(state["step"])
        optimizer = self.run.checkpoint_path / "optimizer.pt"
        if optimizer.exists():
            saved = torch.load(optimizer, weights_only=False)
            if self.policies is None:
                with self.backend.policy() as model:
                    self.algorithm.load_state_dict(model, saved)
            for name in self.policies or []:
                with self.backend.policy(name) as model:
                    self.algorithm.load_state_dict(model, saved, name)
        self.run.drop_from(self.step + 1)  # the steps after the checkpoint are redone: each is logged once
        self.history = [h for h in self.run.history() if h.get("step", 0) <= self.step]
        return True


def _what_trained(
    batch: Batch, stats: CreditStats, trainable: Sequence[Transition], update: dict[str, float]
) -> dict[str, Any]:
    """A step's account of itself: transitions trained, failures and their commonest error, and why nothing
    trained when nothing did."""
    trained = int(update.get("trained_transitions", len(trainable)))
    out: dict[str, Any] = {"trained": trained}
    errors = top_errors(batch.rollouts, 1)
    if errors:
        out["top_error"] = errors[0][0]
    if not trainable:
        out["idle"] = idle_reason(batch.results, stats)
    elif not trained:
        out["idle"] = (
            f"the update dropped all {len(trainable)} transitions with an advantage "
            f"({update.get('stale_dropped', 0):g} stale; the rest had no token ids)"
        )
    return out
