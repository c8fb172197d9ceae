"""The training loop behind ``Trainer.fit``: rollouts → transitions → GRPO update → new weights, with
evaluation, checkpoints, metrics and a progress bar.

Each step samples ``tasks_per_step`` training tasks, enqueues ``group_size`` rollouts of each (sampled at
the algorithm's temperature), runs them, harvests them from the store (so it stays small), builds
transitions, computes per-rollout group advantages and updates the model in place; the proxy serves the new
weights to the next rollouts. Validation runs before training, every ``eval_every`` steps and at the end,
greedy (temperature 0) and sampled (temperature 1). A checkpoint (weights, optimizer, trainer state) is
written after every evaluation; ``resume=True`` continues from it.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import _json
from tether.adapters import WrappedAgent
from tether.algorithms.advantages import assign, group_advantages
from tether.run_dir import RunDir
from tether.transitions import build_transitions, is_proxy_llm_span, unknown_optimize_names
from tether.types import LLMEndpoint, Mode, Rollout, RolloutSpec, Task, Transition

if TYPE_CHECKING:
    from tether.runner import Runner
    from tether.store import Store
    from tether.trainer import Trainer


@dataclass
class FitResult:
    run_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None
    plot: Path | None = None
    interrupted: bool = False

    @property
    def evals(self) -> list[dict[str, Any]]:
        return [h for h in self.history if h.get("kind") == "eval"]

    @property
    def before(self) -> dict[str, Any] | None:
        return self.evals[0] if self.evals else None

    @property
    def after(self) -> dict[str, Any] | None:
        return self.evals[-1] if self.evals else None

    def summary(self, labels: Mapping[str, str] | None = None, heading: str = "") -> str:
        """A before/after/gain table of the first and last evaluation, then where the curve, checkpoint and
        metrics are. ``labels`` maps the eval metrics to show to their row labels (default: greedy and
        sampled accuracy); ``heading`` names the table's first column."""
        before, after = self.before, self.after
        if before is None or after is None:
            return "no evaluation was recorded"
        labels = labels or _DEFAULT_LABELS
        width = max(len(heading), *(len(label) for label in labels.values())) + 2
        lines = [f"{heading:{width}}{'before':>8}{'after':>8}{'gain':>8}"]
        for key, label in labels.items():
            gain = (after[key] - before[key]) * 100
            lines.append(f"{label:{width}}{before[key]:>8.0%}{after[key]:>8.0%}{gain:>+7.0f}p")
        lines += ["", f"curve: {self.plot}", f"checkpoint: {self.checkpoint}"]
        lines.append(f"metrics: {self.run_dir / 'metrics.jsonl'}")
        return "\n".join(lines)


_DEFAULT_LABELS = {"greedy_accuracy": "accuracy (greedy)", "sampled_accuracy": "accuracy (T=1)"}


def as_task(item: Any) -> Task:
    """A ``Task`` for a dataset item; raw inputs get a stable id from their content."""
    if isinstance(item, Task):
        return item
    digest = hashlib.sha1(_json.dumps(item)).hexdigest()[:12]
    return Task(input=item, task_id=f"task-{digest}")


@dataclass
class _Batch:
    rollouts: list[Rollout]
    transitions: list[Transition]
    problems: list[str]
    agent_names: set[str]
    tool_rate: float
    seconds: float


class FitLoop:
    def __init__(self, trainer: Trainer, agent: WrappedAgent, backend: Any, run: RunDir) -> None:
        self.trainer = trainer
        self.agent = agent
        self.backend = backend
        self.run = run
        self.algorithm = trainer.algorithm
        self.history: list[dict[str, Any]] = []
        self.step = 0

    # -- one batch of rollouts ------------------------------------------------------------------------------

    async def _run_batch(
        self,
        store: Store,
        runner: Runner,
        proxy: Any,
        tasks: Sequence[Task],
        repeats: int,
        sampling: dict[str, Any],
        mode: Mode,
    ) -> _Batch:
        started = time.perf_counter()
        resources = await store.add_resources(
            llm=LLMEndpoint(base_url=proxy.url, sampling={**self.trainer.sampling, **sampling})
        )
        specs = [
            RolloutSpec(
                input=task.input,
                task_id=task.task_id,
                mode=mode,
                metadata=dict(task.metadata),
                max_attempts=self.trainer.max_attempts,
                timeout_s=self.trainer.timeout_s,
                resources_version=resources.version,
            )
            for task in tasks
            for _ in range(repeats)
        ]
        enqueued = await store.enqueue(specs)
        await runner.run_until_idle()
        harvested = await store.harvest([r.rollout_id for r in enqueued])
        batch = _Batch([], [], [], set(), 0.0, 0.0)
        with_tools = 0
        for item in harvested:
            batch.rollouts.append(item.rollout)
            last = item.attempts[-1].attempt_id if item.attempts else None
            spans = [s for s in item.spans if s.attempt_id == last]
            report = build_transitions(
                item.rollout,
                spans,
                optimize=self.agent.optimize,
                credit=self.trainer.credit,
                tool_error_penalty=self.trainer.tool_error_penalty,
            )
            batch.transitions.extend(report.transitions)
            batch.agent_names |= report.agent_names
            if item.rollout.status.value == "succeeded":
                batch.problems.extend(report.problems)
            else:
                batch.problems.append(
                    f"rollout {item.rollout.rollout_id} failed: {_last_line(item.rollout.error)}"
                )
            with_tools += any(_has_tool_call(s) for s in spans)
        batch.tool_rate = with_tools / max(len(harvested), 1)
        batch.seconds = time.perf_counter() - started
        return batch

    # -- evaluation -----------------------------------------------------------------------------------------

    async def evaluate(self, store: Store, runner: Runner, proxy: Any, val: Sequence[Task]) -> dict[str, Any]:
        record: dict[str, Any] = {"kind": "eval", "step": self.step}
        for label, temperature in (("greedy", 0.0), ("sampled", 1.0)):
            batch = await self._run_batch(store, runner, proxy, val, 1, {"temperature": temperature}, Mode.VAL)
            record[f"{label}_accuracy"] = _mean_reward(batch.rollouts)
            record[f"{label}_tool_rate"] = batch.tool_rate
            record[f"{label}_failed"] = sum(r.status.value != "succeeded" for r in batch.rollouts)
        return record

    # -- training -------------------------------------------------------------------------------------------

    async def train_step(
        self, store: Store, runner: Runner, proxy: Any, train: Sequence[Task], rng: random.Random
    ) -> dict[str, Any]:
        algo = self.algorithm
        tasks = rng.sample(list(train), min(algo.tasks_per_step, len(train)))
        batch = await self._run_batch(
            store, runner, proxy, tasks, algo.group_size, {"temperature": algo.temperature}, Mode.TRAIN
        )
        if self.step == 0:
            self._check_wiring(batch)
        stats = group_advantages(batch.rollouts, scale_by_std=algo.scale_by_std)
        trainable = assign(batch.transitions, stats)

        def _update() -> dict[str, float]:
            with self.backend.policy() as model:
                return algo.update(model, trainable, pad_token_id=_pad_id(self.backend))

        update = await asyncio.to_thread(_update)
        self.step += 1
        return {
            "kind": "train",
            "step": self.step,
            "reward": _mean_reward(batch.rollouts),
            "tool_rate": batch.tool_rate,
            "rollouts": len(batch.rollouts),
            "failed": sum(r.status.value != "succeeded" for r in batch.rollouts),
            "groups": stats.groups,
            "flat_groups": stats.flat_groups,
            "transitions": len(batch.transitions),
            "rollouts_per_s": len(batch.rollouts) / max(batch.seconds, 1e-9),
            **update,
        }

    def _check_wiring(self, batch: _Batch) -> None:
        optimize = self.agent.optimize
        unknown = unknown_optimize_names(optimize, batch.agent_names)
        if unknown and optimize is not None and not (optimize & batch.agent_names):
            raise ValueError(f"{unknown}; nothing would be trained")
        if unknown:  # a sub-agent on a path the first rollouts did not take (a conditional node): say so
            warnings.warn(f"after the first {len(batch.rollouts)} rollouts: {unknown}", stacklevel=2)
        if batch.rollouts and not batch.transitions:
            problems = "; ".join(dict.fromkeys(batch.problems)) or "no LLM call was captured"
            raise RuntimeError(f"the first training rollouts produced no transitions: {problems}")

    # -- checkpoints ----------------------------------------------------------------------------------------

    def save(self) -> Path:
        import torch

        def write(directory: Path) -> None:
            self.backend.save(str(directory))
            torch.save(self.algorithm.state_dict(), directory / "optimizer.pt")

        return self.run.save_checkpoint(write, {"step": self.step})

    def restore(self) -> bool:
        state = self.run.load_state()
        if state is None:
            return False
        import torch

        self.step = int(state["step"])
        optimizer = self.run.checkpoint_path / "optimizer.pt"
        if optimizer.exists():
            with self.backend.policy() as model:
                self.algorithm.load_state_dict(model, torch.load(optimizer, weights_only=False))
        self.history = [h for h in self.run.history() if h.get("step", 0) <= self.step]
        return True


def _mean_reward(rollouts: Sequence[Rollout]) -> float:
    return sum(r.reward or 0.0 for r in rollouts) / len(rollouts) if rollouts else 0.0


def _has_tool_call(span: Any) -> bool:
    if not is_proxy_llm_span(span):
        return False
    return any((c.get("message") or {}).get("tool_calls") for c in span.attributes.get("choices") or [])


def _pad_id(backend: Any) -> int:
    tokenizer = getattr(backend, "tokenizer", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else 0


def _last_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[-1] if text and text.strip() else "unknown error"
