"""A training run's folder (``runs/<name>/``): metrics JSONL, checkpoints, the trainer state and the curve.

Each metrics row also goes to the run's ``reporter`` when it has one (``Trainer(report_to=...)``:
TensorBoard, W&B, MLflow; ``tether.training.run.report``).

Checkpoints are written to a temporary folder and renamed into place, so an interrupted save never
replaces the last good checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class RowSink(Protocol):
    """Somewhere else metrics rows go (``tether.training.run.report.Reporter``)."""

    def log(self, row: dict[str, Any]) -> None: ...


@dataclass
class RunDir:
    path: Path
    #: where each metrics row goes besides metrics.jsonl (set while ``Trainer.fit`` runs with ``report_to=``)
    reporter: RowSink | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(cls, root: str | os.PathLike[str], name: str) -> RunDir:
        path = Path(root) / name
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint"

    @property
    def state_path(self) -> Path:
        return self.checkpoint_path / "trainer_state.json"

    @property
    def plot_path(self) -> Path:
        return self.path / "curve.png"

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.path / 'store.db'}"

    def log(self, record: dict[str, Any]) -> None:
        row = {"time": time.time(), **record}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.reporter is not None:
            self.reporter.log(row)

    def history(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def run_step(self, step: int) -> int:
        """``step`` (the algorithm's own count) as the run numbers it in ``metrics.jsonl``."""
        return step

    def trained_before(self) -> bool:
        """Whether an earlier part of the run (a previous stage) trained the weights."""
        return False

    def drop_from(self, step: int) -> None:
        """Remove the rows at ``step`` and after (the algorithm's own count) from ``metrics.jsonl``: a resumed
        run redoes those steps, and each must be in the metrics once."""
        self._rewrite(lambda row: isinstance(row.get("step"), int) and row["step"] >= self.run_step(step))

    def _rewrite(self, drop: Callable[[dict[str, Any]], bool]) -> None:
        rows = self.history()
        kept = [row for row in rows if not drop(row)]
        if len(kept) == len(rows):
            return
        tmp = self.metrics_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
        tmp.replace(self.metrics_path)

    def save_checkpoint(self, write_weights: Callable[[Path], None], state: dict[str, Any]) -> Path:
        """Write weights (via ``write_weights(dir)``) and trainer state atomically into ``checkpoint/``."""
        tmp = self.path / "checkpoint.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        write_weights(tmp)
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        old = self.path / "checkpoint.old"
        if old.exists():
            shutil.rmtree(old)
        if self.checkpoint_path.exists():
            self.checkpoint_path.rename(old)
        tmp.rename(self.checkpoint_path)
        if old.exists():
            shutil.rmtree(old)
        return self.checkpoint_path

    def load_state(self) -> dict[str, Any] | None:
        if not self.state_path.exists():
            return None
        state: dict[str, Any] = json.loads(self.state_path.read_text())
        return state

    def plot(self, history: list[dict[str, Any]]) -> Path | None:
        """Reward and accuracy against step as a PNG; None when matplotlib is not installed."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        train = [h for h in history if h.get("kind") == "train"]
        evals = [h for h in history if h.get("kind") == "eval"]
        fig, ax = plt.subplots(figsize=(7, 4))
        if train:
            ax.plot(
                [h["step"] for h in train], [h["reward"] for h in train], label="train reward (sampled)", alpha=0.6
            )
        for key, label in (
            ("greedy_accuracy", "val accuracy (greedy)"),
            ("sampled_accuracy", "val accuracy (T=1)"),
        ):
            points = [(h["step"], h[key]) for h in evals if key in h]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(self.plot_path, dpi=100)
        plt.close(fig)
        return self.plot_path
