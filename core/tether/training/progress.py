"""The progress bar of ``Trainer.fit``: step, train reward, what the step trained (transitions, flat groups out
of groups, failed rollouts with their commonest error, or why it trained nothing), validation accuracy,
rollouts per second, and the last update's trainer-vs-sampler logprob drift (mean and max absolute difference,
``-`` until measured).
``kind="sft"`` (``tether.SFT``) shows the loss and examples per second instead of reward, rate and drift.

On a terminal it is one live bar. Elsewhere (stdout piped to a file or a log collector, where a redrawn line is
cut to the console's width and arrives only at the end) each update prints one whole plain line instead, with
the step and the time elapsed: ``training 2/20  reward 0.50  trained 24 · flat 1/4  val 30%  ...  0:01:12``."""

from __future__ import annotations

import re
import time
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
        #: not a terminal: one plain line per update (``_print_line``) instead of the live bar
        self._lines: Console | None = None
        self._started = 0.0
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
            text = re.sub(r"\{(\w+)\}", r"{task.fields[\1]}", _RL if self._kind == "rl" else _SFT)
            console = self._console or Console()
            if not console.is_terminal and not console.is_jupyter:
                self._lines, self._started = console, time.monotonic()
                return self
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
        elif self._lines is not None and record.get("kind") in ("train", "sft", "eval"):
            self._print_line(int(record.get("step", 0)))

    def _print_line(self, step: int) -> None:
        """One whole line (never cut to the console's width) for a console that is not a terminal."""
        assert self._lines is not None
        fields = _RL if self._kind == "rl" else _SFT
        elapsed = int(time.monotonic() - self._started)
        clock = f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"
        label = "sft" if self._kind == "sft" else "training"
        line = f"{label} {step}/{self._total}  {fields.format(**self._fields)}  {clock}"
        self._lines.out(line, highlight=False)


#: the fields of the line (``{name}``: a field; the live bar reads them as ``{task.fields[name]}``)
_RL = "reward {reward}  {trained}  val {val}  {rate} rollouts/s  drift {drift}"
_SFT = "loss {loss}  val {val}  {rate} examples/s"


def _drift_text(record: dict[str, Any]) -> str:
    """``2.1e-06 (max 3.8e-05)``: a train record's mean and largest trainer-vs-sampler logprob difference."""
    return f"{record['drift_mean']:.2g} (max {record['drift_max']:.2g})"


def trained_text(record: dict[str, Any]) -> str:
    """``trained 24 · flat 1/4 · failed 2 (ValueError: ...)``, or ``trained nothing: <why>``: what a train
    record says the step trained."""
    parts = [f"trained {record.get('trained', 0)}"] if record.get("trained") else []
    if not parts:
        parts.append(f"trained nothing: {_clip(str(record.get('idle', '')), 90)}")
    if record.get("groups"):
        parts.append(f"flat {record.get('flat_groups', 0)}/{record['groups']}")
    if record.get("failed"):
        parts.append(f"failed {record['failed']} ({_clip(str(record.get('top_error', '')), 60)})")
    return " · ".join(parts)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
