"""What ``Trainer.fit`` returns: the run folder, the metrics history, the last checkpoint and curve.

Every algorithm returns a ``FitResult`` (or a subclass with more, such as ``APOResult``). ``summary`` is the
before/after table the examples print; a run stopped by Ctrl-C is ``interrupted`` and its summary says where
the last checkpoint is and how to continue — the library itself prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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

    @property
    def message(self) -> str | None:
        """What an interrupted run left and how to continue it; None for a run that finished."""
        if not self.interrupted:
            return None
        resume = (
            f"Trainer(name={self.run_dir.name!r}, run_root={str(self.run_dir.parent)!r}).fit(..., resume=True)"
        )
        if self.checkpoint is None:
            return f"interrupted before the first checkpoint; the run folder is {self.run_dir}"
        return f"interrupted: the last checkpoint is in {self.checkpoint}; {resume} continues"

    def summary(self, labels: Mapping[str, str] | None = None, heading: str = "") -> str:
        """A before/after/gain table of the first and last evaluation, then where the curve, checkpoint and
        metrics are (after a line saying so when the run was interrupted). ``labels`` maps the eval metrics
        to show to their row labels (default: greedy and sampled accuracy); ``heading`` names the table's
        first column."""
        head = [self.message] if self.message else []
        before, after = self.before, self.after
        if before is None or after is None:
            return "\n".join([*head, "no evaluation was recorded"])
        labels = labels or _DEFAULT_LABELS
        width = max(len(heading), *(len(label) for label in labels.values())) + 2
        lines = [*head, f"{heading:{width}}{'before':>8}{'after':>8}{'gain':>8}"]
        for key, label in labels.items():
            gain = (after[key] - before[key]) * 100
            lines.append(f"{label:{width}}{before[key]:>8.0%}{after[key]:>8.0%}{gain:>+7.0f}p")
        lines += ["", f"curve: {self.plot}", f"checkpoint: {self.checkpoint}"]
        lines.append(f"metrics: {self.run_dir / 'metrics.jsonl'}")
        return "\n".join(lines)


_DEFAULT_LABELS = {"greedy_accuracy": "accuracy (greedy)", "sampled_accuracy": "accuracy (T=1)"}
