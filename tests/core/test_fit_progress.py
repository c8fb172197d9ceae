"""The progress line of ``Trainer.fit``: reward, validation accuracy, rate, and the last update's drift."""

from __future__ import annotations

import io

from rich.console import Console

from tether.training.progress import FitProgress


def _line(*records: dict[str, object]) -> str:
    out = io.StringIO()
    with FitProgress(3, console=Console(file=out, width=200)) as bar:
        for record in records:
            bar.update(record)
    return out.getvalue().splitlines()[-1]


def test_the_progress_line_shows_the_drift_of_the_last_update() -> None:
    train = {"kind": "train", "step": 1, "reward": 0.5, "rollouts_per_s": 3.0}
    assert "drift -" in _line(train)  # not measured (no recorded logprobs)
    line = _line(train, {**train, "step": 2, "drift_mean": 2.1e-6, "drift_max": 3.8e-5})
    assert "2/3" in line and "reward 0.50" in line and "drift 2.1e-06 (max 3.8e-05)" in line
    assert "val 75%" in _line({"kind": "eval", "step": 0, "greedy_accuracy": 0.75})


def test_the_progress_line_says_what_each_step_trained() -> None:
    train = {"kind": "train", "step": 1, "reward": 0.5, "rollouts_per_s": 3.0, "groups": 4, "flat_groups": 1}
    line = _line({**train, "trained": 24, "failed": 2, "top_error": "KeyError: 'answer'"})
    assert "trained 24 · flat 1/4 · failed 2 (KeyError: 'answer')" in line
    idle = {**train, "trained": 0, "flat_groups": 4, "idle": "every group scored the same"}
    assert "trained nothing: every group scored the same · flat 4/4" in _line(idle)
    packed = _line({**train, "trained": 24, "sequences": 9.0})
    assert "trained 24 in 9 seqs · flat 1/4" in packed  # packing merged a rollout's calls
    assert "trained 24 · flat" in _line({**train, "trained": 24, "sequences": 24.0})
