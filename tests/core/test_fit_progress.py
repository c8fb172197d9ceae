"""The progress line of ``Trainer.fit``: reward, validation accuracy, rate, and the last update's drift."""

from __future__ import annotations

import io
import subprocess
import sys

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


def test_in_a_pipe_each_update_is_one_whole_line() -> None:
    """Issue 37 item 6: stdout not a terminal (a pipe, a log file): one plain line per update, never cut to the
    console's width (before: one live line redrawn with carriage returns, cut to ``tra… reward 0.00 …``)."""
    out = io.StringIO()
    idle = "every group scored the same (4 of 4 flat): rewards must vary within a task's group"
    train = {"kind": "train", "step": 1, "reward": 0.0, "rollouts_per_s": 2.0, "trained": 0, "idle": idle}
    with FitProgress(20, console=Console(file=out, width=40)) as bar:
        bar.update(train)
        bar.update({"kind": "eval", "step": 1, "greedy_accuracy": 0.3})
        bar.update({**train, "step": 2})
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("training 1/20  reward 0.00  trained nothing: every group scored the same")
    assert "rewards must vary within a task's group" in lines[0] and "val -" in lines[0]
    assert lines[1].startswith("training 1/20") and "val 30%" in lines[1]
    assert lines[2].startswith("training 2/20") and lines[2].rstrip().endswith(tuple("0123456789"))


def test_a_piped_process_prints_a_line_per_update() -> None:
    script = (
        "from tether.training.progress import FitProgress\n"
        "with FitProgress(2, kind='sft') as bar:\n"
        "    for step in (1, 2):\n"
        "        bar.update({'kind': 'sft', 'step': step, 'loss': 1.5, 'examples_per_s': 3.0})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["sft 1/2", "sft 2/2"]
    assert all("loss 1.500" in line and "3.0 examples/s" in line for line in lines)
