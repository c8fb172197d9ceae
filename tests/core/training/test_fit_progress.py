"""The progress line of ``Trainer.fit``: reward, validation accuracy, rate, and the last update's drift."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys

import pytest
from rich.console import Console

import tether.training.run.progress as progress_module
from tether.training.run.progress import FitProgress, evaluation_bar, rollouts_bar, sampling_bar, updating


def _line(*records: dict[str, object]) -> str:
    out = io.StringIO()
    with FitProgress(3, console=Console(file=out, width=200), line_interval_s=0) as bar:
        for record in records:
            bar.update(record)
    return out.getvalue().splitlines()[-1]


def test_the_progress_line_shows_the_drift_of_the_last_update() -> None:
    train = {"kind": "train", "step": 1, "reward": 0.5, "rollouts_per_s": 3.0}
    assert "drift -" in _line(train)  # not measured (no recorded logprobs)
    line = _line(train, {**train, "step": 2, "drift_mean": 2.1e-6, "drift_max": 3.8e-5})
    assert "2/3" in line and "reward 0.50" in line and "drift 2.1e-06 (max 3.8e-05)" in line
    assert _line({"kind": "eval", "step": 0, "greedy_accuracy": 0.75, "sampled_accuracy": 0.5}) == (
        "eval step 0: accuracy greedy 75%, T=1 50%"
    )
    assert "val 75%" in _line({"kind": "eval", "step": 0, "greedy_accuracy": 0.75}, train)


def test_the_progress_line_says_what_each_step_trained() -> None:
    train = {"kind": "train", "step": 1, "reward": 0.5, "rollouts_per_s": 3.0, "groups": 4, "flat_groups": 1}
    line = _line({**train, "trained": 24, "failed": 2, "top_error": "KeyError: 'answer'"})
    assert "trained 24 · flat 1/4 · failed 2 (KeyError: 'answer')" in line
    idle = {**train, "trained": 0, "flat_groups": 4, "idle": "every group scored the same"}
    assert "trained nothing: every group scored the same · flat 4/4" in _line(idle)
    packed = _line({**train, "trained": 24, "sequences": 9.0})
    assert "trained 24 in 9 seqs · flat 1/4" in packed  # packing merged a rollout's calls
    assert "trained 24 · flat" in _line({**train, "trained": 24, "sequences": 24.0})


def test_in_a_pipe_each_update_is_a_line_and_an_evaluation_counts_its_rollouts() -> None:
    out = io.StringIO()  # not a terminal: a line per update, no carriage returns
    with FitProgress(3, console=Console(file=out, width=200)) as bar:
        progress = bar.evaluation(0, 8)
        progress(3, 8)  # within LINE_INTERVAL_S of the first line: not printed
        progress(8, 8)  # the last always is
        progress.close()
        bar.update({"kind": "eval", "step": 0, "greedy_accuracy": 0.5})
        bar.update({"kind": "train", "step": 1, "reward": 0.25, "rollouts_per_s": 2.0, "kv_reused": 0.62})
        bar.update({"kind": "train", "step": 2, "reward": 0.5, "rollouts_per_s": 2.0})  # too soon: no line
        bar.update({"kind": "train", "step": 3, "reward": 0.75, "rollouts_per_s": 2.0})  # the last: a line
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0].startswith("eval step 0: 0/8 rollouts")
    assert lines[1].startswith("eval step 0: 8/8 rollouts")
    assert lines[2] == "eval step 0: accuracy greedy 50%"
    assert "step 1/3" in lines[3] and "reward 0.25" in lines[3] and "kv 62%" in lines[3]
    assert "step 3/3" in lines[4] and "reward 0.75" in lines[4]
    assert len(lines) == 5


def test_on_a_terminal_an_evaluation_has_its_own_bar() -> None:
    out = io.StringIO()
    with FitProgress(3, console=Console(file=out, width=200, force_terminal=True)) as bar:
        progress = bar.evaluation(0, 8)
        progress(5, 8)
        assert bar._progress is not None
        (evaluating,) = [t for t in bar._progress.tasks if t.description == "evaluating"]
        assert (evaluating.completed, evaluating.total) == (5, 8)
        progress.close()
        assert [t.description for t in bar._progress.tasks] == ["training"]


def test_an_evaluation_inside_a_bars_block_shows_its_progress_there() -> None:
    out = io.StringIO()
    assert evaluation_bar(0, 4) is None  # outside any bar: nothing to show it on
    with FitProgress(2, console=Console(file=out, width=200), kind="sft"):
        inner = evaluation_bar(0, 4)  # what evaluate() takes when its caller gave no callback (SFT)
        assert inner is not None
        inner(4, 4)
        inner.close()
    assert evaluation_bar(0, 4) is None
    assert out.getvalue().splitlines() == ["eval step 0: 0/4 rollouts 0:00", "eval step 0: 4/4 rollouts 0:00"]


def test_in_a_pipe_each_update_is_one_whole_line() -> None:
    """Issue 37 item 6: stdout not a terminal (a pipe, a log file): plain lines, never cut to the console's width
    (before: one live line redrawn with carriage returns, cut to ``tra… reward 0.00 …``)."""
    out = io.StringIO()
    idle = "every group scored the same (4 of 4 flat): rewards must vary within a task's group"
    train = {"kind": "train", "step": 1, "reward": 0.0, "rollouts_per_s": 2.0, "trained": 0, "idle": idle}
    with FitProgress(20, console=Console(file=out, width=40), line_interval_s=0.0) as bar:
        bar.update(train)
        bar.update({"kind": "eval", "step": 1, "greedy_accuracy": 0.3})
        bar.update({**train, "step": 2})
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("step 1/20 reward 0.00  trained nothing: every group scored the same")
    assert "rewards must vary within a task's group" in lines[0] and "val -" in lines[0]
    assert lines[1] == "eval step 1: accuracy greedy 30%"
    assert lines[2].startswith("step 2/20") and "val 30%" in lines[2]


def test_a_piped_process_prints_a_line_per_update() -> None:
    script = (
        "from tether.training.run.progress import FitProgress\n"
        "with FitProgress(2, kind='sft', line_interval_s=0.0) as bar:\n"
        "    for step in (1, 2):\n"
        "        bar.update({'kind': 'sft', 'step': step, 'loss': 1.5, 'examples_per_s': 3.0})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    lines = done.stdout.splitlines()
    assert [" ".join(line.split()[:2]) for line in lines] == ["step 1/2", "step 2/2"]
    assert all("loss 1.500" in line and "3.0 examples/s" in line for line in lines)


def test_a_slow_steps_rollouts_are_heard_in_a_pipe_at_least_every_30_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    assert sampling_bar(3, 64) is None  # outside a bar's block: nothing to show it on
    with FitProgress(5, console=Console(file=out, width=200)):
        rollouts = sampling_bar(3, 64)
        assert rollouts is not None
        rollouts(10, 64)  # a quick step says nothing of its rollouts: the step's own line follows
        clock[0] += 31.0
        rollouts(10, 64)  # no rollout finished for 31 s: still heard from
        clock[0] += 40.0
        rollouts(64, 64)
        rollouts.close()
    assert out.getvalue().splitlines() == [
        "sampling step 3: 10/64 rollouts 0:31",
        "sampling step 3: 64/64 rollouts 1:11",
    ]


def test_a_slow_update_is_heard_in_a_pipe_once_the_output_has_been_quiet_for_30_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress_module, "QUIET_LIMIT_S", 0.3)  # (real seconds: the ticker sleeps on the loop)
    out = io.StringIO()

    async def run(seconds: float) -> None:
        async with updating(4):
            await asyncio.sleep(seconds)  # the update, in its thread

    with FitProgress(5, console=Console(file=out, width=200)) as bar:
        bar.update({"kind": "train", "step": 3, "reward": 0.5, "rollouts_per_s": 1.0, "trained": 4})
        asyncio.run(run(0.05))  # a quick update adds no line
        assert len(out.getvalue().splitlines()) == 1
        asyncio.run(run(1.6))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step 3/5")
    assert 3 <= len(lines) - 1 <= 8 and all(line.startswith("update step 4: 0:0") for line in lines[1:]), lines
    quiet = io.StringIO()
    with FitProgress(5, console=Console(file=quiet, width=200, force_terminal=True)):
        asyncio.run(run(0.8))  # on a terminal the bar's clock runs: no lines
    assert "update step" not in quiet.getvalue()


def test_a_warm_starts_teacher_rollouts_count_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    bar = rollouts_bar("teacher", 2000, console=Console(file=out, width=200))
    assert evaluation_bar(0, 10) is None  # its owner is no FitProgress block: nothing else shows in it
    clock[0] += 2.0
    bar(300, 2000)  # within the line interval of the first line: not said
    clock[0] += 4.0
    bar(900, 2000)
    clock[0] += 1.0
    bar(2000, 2000)  # the last always
    bar.close()
    assert out.getvalue().splitlines() == [
        "warm start: 0/2000 teacher rollouts 0:00",
        "warm start: 900/2000 teacher rollouts 0:06",
        "warm start: 2000/2000 teacher rollouts 0:07",
    ]
    silent = io.StringIO()
    rollouts_bar("teacher", 10, enabled=False, console=Console(file=silent)).close()
    assert silent.getvalue() == ""
    shown = io.StringIO()  # on a terminal: a bar of its own, with no training step's columns
    terminal = rollouts_bar("teacher", 10, console=Console(file=shown, width=120, force_terminal=True))
    terminal(4, 10)
    terminal.close()
    assert "teacher rollouts" in shown.getvalue() and "/10" in shown.getvalue()
    assert "reward" not in shown.getvalue() and "val (" not in shown.getvalue()
