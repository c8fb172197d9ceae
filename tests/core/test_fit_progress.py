"""The progress line of ``Trainer.fit``: reward, validation accuracy, rate, and the last update's drift."""

from __future__ import annotations

import io

from rich.console import Console

from tether.training.progress import FitProgress, evaluation_bar


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
