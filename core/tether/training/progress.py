"""The progress bar of ``Trainer.fit``: step, train reward, what the step trained (transitions and the sequences
packing merged them into, flat groups out of groups, failed rollouts with their commonest error, or why it
trained nothing), validation accuracy, rollouts per second, and the last update's trainer-vs-sampler logprob
drift (mean and max absolute difference, ``-`` until measured).
``kind="sft"`` (``tether.SFT``) shows the loss and examples per second instead of reward, rate and drift."""

from __future__ import annotations

from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class FitProgress:
    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        start: int = 0,
        console: Console | None = None,
        kind: Literal["rl", "sft"] = "rl",
    ) -> None:
        self._kind = kind
        self._console = console
        self._progress: Progress | None = None
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
        }

    def __enter__(self) -> FitProgress:
        if self._enabled:
            text = (
                "reward {task.fields[reward]}  {task.fields[trained]}  val {task.fields[val]}  "
                "{task.fields[rate]} rollouts/s  drift {task.fields[drift]}"
            )
            if self._kind == "sft":
                text = "loss {task.fields[loss]}  val {task.fields[val]}  {task.fields[rate]} examples/s"
            self._progress = Progress(
                TextColumn("[bold]sft" if self._kind == "sft" else "[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(text),
                TimeElapsedColumn(),
                console=self._console,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("fit", total=self._total, completed=self._start, **self._fields)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)

    def update(self, record: dict[str, Any]) -> None:
        if record.get("kind") == "train":
            self._fields["reward"] = f"{record['reward']:.2f}"
            self._fields["rate"] = f"{record['rollouts_per_s']:.1f}"
            self._fields["trained"] = trained_text(record)
            if "drift_mean" in record:
                self._fields["drift"] = _drift_text(record)
        elif record.get("kind") == "sft":
            self._fields["loss"] = f"{record['loss']:.3f}"
            self._fields["rate"] = f"{record['examples_per_s']:.1f}"
        elif record.get("kind") == "eval":
            self._fields["val"] = f"{record.get('greedy_accuracy', 0.0):.0%}"
        if self._progress is not None:
            self._progress.update(self._task, completed=record.get("step", 0), **self._fields)


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
