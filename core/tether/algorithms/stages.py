"""Algorithms run one after another in one run: ``Trainer(algorithm=[tether.WarmStart(...), tether.GRPO(...)])``.

``Stages.fit`` hands each stage the same session (one backend, one store, one run folder) through a view of the
run folder (``StageRun``) that tags its metrics with the stage's name and carries its steps on from where the
previous stage stopped, so ``metrics.jsonl`` holds one history and ``curve.png`` one curve. A stage's checkpoint
records the stage; ``stages.json`` records the stages finished. ``resume=True`` skips the finished stages,
continues the interrupted one from its own checkpoint, or, when it had none yet, starts it from the weights the
previous stage left; a finished last stage continues when it can (GRPO given more ``steps``; not a
``continues_on_resume = False`` algorithm such as ``WarmStart``). When a stage ends with an evaluation, the next
one does not repeat it at its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.algorithms.base import Algorithm, check_algorithm, name_of
from tether.models.base import ModelBackend, TrainableBackend
from tether.training.run.result import FitResult
from tether.training.run.run_dir import RunDir
from tether.types import Task

if TYPE_CHECKING:
    from tether.plugin.wrap import WrappedAgent
    from tether.training.engine.session import Session

_PROGRESS = "stages.json"


@dataclass
class StageRun(RunDir):
    """The run folder as one stage sees it: its records tagged ``stage`` with steps offset by ``offset``, its
    checkpoint state tagged with its ``index``; the curve is the whole run's."""

    index: int = 0
    label: str = ""
    offset: int = 0
    #: the evaluation the previous stage ended with (the starting point of this one), if any
    carried_eval: dict[str, Any] | None = None

    def log(self, record: dict[str, Any]) -> None:
        shifted = dict(record)
        if isinstance(shifted.get("step"), int):
            shifted["step"] += self.offset
        super().log({**shifted, "stage": self.label})

    def history(self) -> list[dict[str, Any]]:
        """This stage's records, with its own step numbers."""
        out = []
        for h in super().history():
            if h.get("stage") == self.label:
                if isinstance(h.get("step"), int):
                    h = {**h, "step": h["step"] - self.offset}
                out.append(h)
        return out

    def run_step(self, step: int) -> int:
        return step + self.offset

    def trained_before(self) -> bool:
        """Whether an earlier stage trained (a warm start's fine-tuning, a GRPO step that trained)."""
        return any(
            h.get("stage") != self.label
            and (h.get("kind") == "sft" or (h.get("kind") == "train" and h.get("trained")))
            for h in RunDir(self.path).history()
        )

    def drop_from(self, step: int) -> None:
        start = self.run_step(step)
        self._rewrite(
            lambda row: (
                row.get("stage") == self.label and isinstance(row.get("step"), int) and row["step"] >= start
            )
        )

    def save_checkpoint(self, write_weights: Any, state: dict[str, Any]) -> Path:
        return super().save_checkpoint(write_weights, {**state, "stage": self.index, "stage_name": self.label})

    def load_state(self) -> dict[str, Any] | None:
        """The checkpoint's state when this stage wrote it, else None (the stage starts afresh)."""
        state = super().load_state()
        return state if state is not None and state.get("stage") == self.index else None

    def plot(self, history: list[dict[str, Any]]) -> Path | None:
        del history
        return super().plot(RunDir(self.path).history())


class Stages(Algorithm):
    """Run ``stages`` (algorithms, or ``{policy: algorithm}`` mappings) in order on one session."""

    def __init__(self, stages: Sequence[Any]) -> None:
        if not stages:
            raise ValueError("algorithm=[] names no stage: give at least one, e.g. [tether.GRPO(...)]")
        from tether.algorithms.joint import Joint

        self.stages: list[Algorithm] = [check_algorithm(Joint(s) if isinstance(s, Mapping) else s) for s in stages]
        names = [name_of(s).lower() for s in self.stages]
        self.labels = [n if names.count(n) == 1 else f"{n}{i + 1}" for i, n in enumerate(names)]

    # -- the algorithm contract: every stage's parts --------------------------------------------------------

    @property
    def uses_train_tasks(self) -> bool:
        return any(s.uses_train_tasks for s in self.stages)

    @property
    def uses_session(self) -> bool:
        return any(s.uses_session for s in self.stages)

    @property
    def needs_reward(self) -> bool:
        """Whether any stage learns from rewards (then preflight refuses rollouts without one)."""
        return any(s.needs_reward for s in self.stages)

    @property
    def scale_by_std(self) -> bool:
        """False when a stage divides no advantage by its group's spread (one credit rule holds for the run)."""
        return all(s.scale_by_std for s in self.stages)

    def check_agent(self, agent: WrappedAgent) -> None:
        """Each stage's own checks of the agent (``Joint``'s), before the run starts."""
        for stage in self.stages:
            stage.check_agent(agent)

    def prepare_backend(self, backend: ModelBackend) -> None:
        for stage in self.stages:
            stage.prepare_backend(backend)

    def check_session(self, session: Session) -> None:
        for stage in self.stages:
            stage.check_session(session)

    async def probe(self, session: Session) -> None:
        for stage in self.stages:
            await stage.probe(session)

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        run = session.require_run("Trainer.fit")
        progress = run.path / _PROGRESS
        saved = json.loads(progress.read_text()) if session.resume and progress.exists() else {}
        done, offsets = int(saved.get("done", 0)), [int(o) for o in saved.get("offsets", [])]
        if not session.resume:
            progress.unlink(missing_ok=True)
        result = FitResult(run_dir=run.path)
        last = len(self.stages) - 1
        for index, stage in enumerate(self.stages):
            # a finished stage is skipped; the last one continues when it can (GRPO given more steps)
            if index < done and not (index == last and stage.continues_on_resume):
                continue
            history = [h for h in run.history() if h.get("stage") in self.labels[:index]]
            steps = [h["step"] for h in history if isinstance(h.get("step"), int)]
            evals = [h for h in history if h.get("kind") == "eval"]
            offsets = [*offsets[:index], offsets[index] if index < len(offsets) else max(steps, default=0)]
            view = StageRun(
                run.path,
                index=index,
                label=self.labels[index],
                offset=offsets[index],
                carried_eval=evals[-1] if evals and evals[-1]["step"] == max(steps) else None,
            )
            resume = session.resume and view.load_state() is not None
            if session.resume and not resume and index > 0 and run.state_path.exists():
                await _load_weights(session, run)  # the previous stage's last weights
            with _as_stage(session, view, resume):
                result = await stage.fit(session, train, val)
            progress.write_text(
                json.dumps({"done": max(done, index + 1), "stages": self.labels, "offsets": offsets})
            )
        checkpoint = result.checkpoint or (run.checkpoint_path if run.state_path.exists() else None)
        return FitResult(
            run_dir=run.path,
            history=run.history(),
            checkpoint=checkpoint,
            plot=run.plot(run.history()),
            interrupted=result.interrupted,
            stopped=result.stopped,
        )


async def _load_weights(session: Session, run: RunDir) -> None:
    backend = session.backend
    if isinstance(backend, TrainableBackend):
        await asyncio.to_thread(backend.load_weights, str(run.checkpoint_path))


@contextlib.contextmanager
def _as_stage(session: Session, view: StageRun, resume: bool) -> Iterator[None]:
    """The session with ``view`` as its run folder and ``resume`` for one stage."""
    run, was = session.run, session.resume
    session.run, session.resume = view, resume
    try:
        yield
    finally:
        session.run, session.resume = run, was
