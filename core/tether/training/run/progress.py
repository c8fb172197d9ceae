"""The progress bar of ``Trainer.fit``: step, train reward, what the step trained (transitions and the
sequences packing merged them into, flat groups out of groups, failed rollouts with their commonest error, or
why it trained nothing), validation accuracy, rollouts per second, the last update's trainer-vs-sampler logprob
drift (mean and max absolute difference, ``-`` until measured), and the share of prompt tokens the local
sampler's KV cache reused (``-`` for a backend without one). ``kind="sft"`` (``tether.SFT``) shows the loss and
examples per second instead of reward, rate and drift.

Every evaluation shows its own bar (``evaluating``: rollouts finished of the evaluation's total), the one before
training too. On a terminal the bars redraw in place; when the output is not a terminal (a pipe, a log file)
each update is one line instead, never carriage returns: ``step 3/20 reward 0.41 ...`` and ``eval step 0:
12/40 rollouts 0:31`` (a step's, and an evaluation's progress, at most each ``LINE_INTERVAL_S``; the last step
and each evaluation's result, ``eval step 5: accuracy greedy 62%, T=1 48%``, always). An evaluation run inside
the block of a ``FitProgress`` shows its bar there whoever runs it (``evaluation_bar``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: the FitProgress whose block is running (evaluations inside it show their bar there)
_ACTIVE: ContextVar[FitProgress | None] = ContextVar("tether_fit_progress", default=None)
#: an eval record's accuracies, as its line in a pipe names them
_EVAL_PASSES = (("greedy_accuracy", "greedy"), ("sampled_accuracy", "T=1"))
#: in a pipe, the least seconds between two lines of training steps, or of one evaluation's progress (the last
#: step's and an evaluation's last line always show)
LINE_INTERVAL_S = 5.0
QUIET_LIMIT_S = 30.0  # a rollout bar with no news repeats its line after this long (in a pipe)


class FitProgress:
    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        start: int = 0,
        console: Console | None = None,
        kind: Literal["rl", "sft", "rollouts"] = "rl",
        line_interval_s: float = LINE_INTERVAL_S,
    ) -> None:
        self._kind = kind
        self._interval = line_interval_s
        self._console = console
        self._progress: Progress | None = None
        self._lines: Console | None = None  # line mode: the output is not a terminal
        self._stepped = -float("inf")  # when line mode last printed a step's line
        self._said = time.monotonic()  # when line mode last printed any line (``updating`` reads it)
        self._task: Any = None
        self._total = total
        self._start = start
        self._enabled = enabled
        self._fields: dict[str, Any] = {
            "reward": "-",
            "trained": "-",
            "val": "-",
            "rate": "-",
            "drift": "-",
            "loss": "-",
            "kv": "-",
        }

    def _text(self) -> str:
        if self._kind == "rollouts":  # a bar of rollouts alone: their count and clock say it all
            return ""
        if self._kind == "sft":
            return "loss {task.fields[loss]}  val {task.fields[val]}  {task.fields[rate]} examples/s"
        return (
            "reward {task.fields[reward]}  {task.fields[trained]}  val {task.fields[val]}  "
            "{task.fields[rate]} rollouts/s  drift {task.fields[drift]}  kv {task.fields[kv]}"
        )

    def __enter__(self) -> FitProgress:
        # a rollouts bar's owner runs no block of its own: evaluations and steps never show in it
        self._token = _ACTIVE.set(self) if self._kind != "rollouts" else None
        if not self._enabled:
            return self
        console = self._console or Console()
        if not console.is_terminal:
            self._lines = console
            return self
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self._text()),
            TimeElapsedColumn(),
            console=console,
        )
        self._progress.__enter__()
        if self._kind == "rollouts":  # only the bars of its rollouts (``rollouts_bar``)
            return self
        self._task = self._progress.add_task(
            "sft" if self._kind == "sft" else "training", total=self._total, completed=self._start, **self._fields
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)
        if self._progress is not None:
            self._progress.__exit__(None, None, None)

    def update(self, record: dict[str, Any]) -> None:
        if record.get("kind") == "train":
            self._fields["reward"] = f"{record['reward']:.2f}"
            self._fields["rate"] = f"{record['rollouts_per_s']:.1f}"
            self._fields["trained"] = trained_text(record)
            if "drift_mean" in record:
                self._fields["drift"] = _drift_text(record)
            if "kv_reused" in record:
                self._fields["kv"] = f"{record['kv_reused']:.0%}"
        elif record.get("kind") == "sft":
            self._fields["loss"] = f"{record['loss']:.3f}"
            self._fields["rate"] = f"{record['examples_per_s']:.1f}"
        elif record.get("kind") == "eval":
            self._fields["val"] = f"{record.get('greedy_accuracy', 0.0):.0%}"
        if self._progress is not None:
            if self._task is not None:
                self._progress.update(self._task, completed=record.get("step", 0), **self._fields)
        elif self._lines is not None and record.get("kind") == "eval":
            passes = [f"{label} {record[key]:.0%}" for key, label in _EVAL_PASSES if key in record]
            self._say(f"eval step {record.get('step', 0)}: accuracy {', '.join(passes) or '-'}")
        elif self._lines is not None and record.get("kind") in ("train", "sft"):
            # a step's line at most each ``line_interval_s`` (SFT records every batch), the last always
            now = time.monotonic()
            if record.get("step") == self._total or now - self._stepped >= self._interval:
                self._stepped = now
                step = f"step {record.get('step', 0)}/{self._total}"
                self._say(f"{step} {self._text().format(task=SimpleNamespace(fields=self._fields))}")

    def evaluation(self, step: int, total: int) -> EvalBar:
        """The bar of one evaluation at ``step`` of ``total`` rollouts: call it with (finished, total) as
        rollouts finish, and ``close()`` it when the evaluation is done."""
        return EvalBar(self, step, total)

    def _say(self, line: str) -> None:
        if self._lines is not None:
            self._said = time.monotonic()
            self._lines.print(line, highlight=False, markup=False, soft_wrap=True)


def rollouts_bar(label: str, total: int, *, enabled: bool = True, console: Console | None = None) -> EvalBar:
    """The progress of rollouts run outside a training step, such as a warm start's teacher rollouts
    (``label="teacher"``: ``warm start: 75/2000 teacher rollouts 0:05`` in a pipe, at most each
    ``LINE_INTERVAL_S``, and the last): a bar of its own on a terminal; ``close()`` it when they are done."""
    owner = FitProgress(total, enabled=enabled, console=console, kind="rollouts").__enter__()
    return EvalBar(owner, 0, total, label=label)


@contextlib.asynccontextmanager
async def updating(step: int) -> AsyncIterator[None]:
    """Around a training step's update: in a pipe, ``update step 3: 0:41`` whenever the output has been quiet for
    ``QUIET_LIMIT_S`` (a slow update on a loaded CPU is never silent for long); nothing on a terminal, where the
    bar's clock runs, or outside a ``FitProgress`` block."""
    bar = _ACTIVE.get()
    if bar is None or bar._lines is None:
        yield
        return
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await asyncio.sleep(min(1.0, QUIET_LIMIT_S / 4))
            now = time.monotonic()
            if now - bar._said >= QUIET_LIMIT_S:
                minutes, seconds = divmod(int(now - started), 60)
                bar._say(f"update step {step}: {minutes}:{seconds:02d}")

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker


def sampling_bar(step: int, total: int) -> EvalBar | None:
    """The bar of a training step's rollouts (``sampling step 3: 12/64 rollouts 0:41`` in a pipe) inside a
    ``FitProgress`` block, or None outside one: a long step is never silent while its rollouts run."""
    bar = _ACTIVE.get()
    return EvalBar(bar, step, total, label="sampling") if bar is not None else None


def evaluation_bar(step: int, total: int) -> EvalBar | None:
    """The bar of an evaluation run inside a ``FitProgress`` block (an algorithm's own, such as SFT's), or None
    outside one: how ``tether.algorithms.evaluation.evaluate`` shows progress it was given no callback for."""
    bar = _ACTIVE.get()
    return bar.evaluation(step, total) if bar is not None else None


class EvalBar:
    """One evaluation's progress (``FitProgress.evaluation``): a second bar on a terminal, a line per update
    (at most one each ``line_interval_s``, and the last) in a pipe."""

    def __init__(self, owner: FitProgress, step: int, total: int, label: str = "eval") -> None:
        self._owner = owner
        self._label = label
        self._step = step
        self._total = total
        self._started = time.monotonic()
        # an evaluation's (and teacher rollouts') lines: its start, each ``line_interval_s``, its end; a step's
        # rollouts (sampling): only while it is slow, each QUIET_LIMIT_S (the step's own line follows it)
        self._counted = label != "sampling"
        self._interval = owner._interval if self._counted else QUIET_LIMIT_S
        self._said = -float("inf") if self._counted else 0.0
        self._done = -1
        self._task: Any = None
        if owner._progress is not None:
            described = {"eval": "evaluating", "teacher": "teacher rollouts"}.get(label, label)
            self._task = owner._progress.add_task(
                described, total=total, **{**owner._fields, "val": f"({described} step {step})"}
            )
        self(0, total)

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic() - self._started
        if done == self._done and now - self._said < QUIET_LIMIT_S:  # (the same count again: said at most
            return  # each QUIET_LIMIT_S, so a pipe hears from a slow step at least that often)
        self._done, self._total = done, total
        progress = self._owner._progress
        if progress is not None and self._task is not None:
            progress.update(self._task, completed=done, total=total)
            return
        if now - self._said >= self._interval or (done >= total and self._counted):
            self._said = now
            clock = "{}:{:02d}".format(*divmod(int(now), 60))
            if self._label == "teacher":
                self._owner._say(f"warm start: {done}/{total} teacher rollouts {clock}")
            else:
                self._owner._say(f"{self._label} step {self._step}: {done}/{total} rollouts {clock}")

    def close(self) -> None:
        progress = self._owner._progress
        if progress is not None and self._task is not None:
            progress.remove_task(self._task)
            self._task = None
        if self._owner._kind == "rollouts":  # its own (``rollouts_bar``): closed with it
            self._owner.__exit__(None, None, None)


def _drift_text(record: dict[str, Any]) -> str:
    """``2.1e-06 (max 3.8e-05)``: a train record's mean and largest trainer-vs-sampler logprob difference."""
    return f"{record['drift_mean']:.2g} (max {record['drift_max']:.2g})"


def trained_text(record: dict[str, Any]) -> str:
    """``trained 24 in 9 seqs · flat 1/4 · failed 2 (ValueError: ...)``, or ``trained nothing: <why>``: what a
    train record says the step trained (``in N seqs`` when packing merged calls into fewer sequences)."""
    trained, sequences = record.get("trained", 0), record.get("sequences")
    packed = f" in {sequences:g} seqs" if sequences and sequences < trained else ""
    parts = [f"trained {trained}{packed}"] if trained else []
    if not parts:
        parts.append(f"trained nothing: {_clip(str(record.get('idle', '')), 90)}")
    if record.get("groups"):
        parts.append(f"flat {record.get('flat_groups', 0)}/{record['groups']}")
    if record.get("failed"):
        parts.append(f"failed {record['failed']} ({_clip(str(record.get('top_error', '')), 60)})")
    return " · ".join(parts)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
