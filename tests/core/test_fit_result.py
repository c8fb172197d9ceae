"""FitResult: the first and last evaluation, and the before/after table the examples print."""

from __future__ import annotations

from pathlib import Path

from tether.training.result import FitResult


def _eval(step: int, greedy: float, sampled: float) -> dict[str, object]:
    return {"kind": "eval", "step": step, "greedy_accuracy": greedy, "sampled_accuracy": sampled}


def test_summary_tables_the_first_and_last_evaluation(tmp_path: Path) -> None:
    history = [
        _eval(0, 0.12, 0.32),
        {"kind": "train", "step": 1, "reward": 0.4},
        _eval(10, 0.5, 0.5),
        _eval(20, 0.73, 0.66),
    ]
    result = FitResult(run_dir=tmp_path, history=history, checkpoint=tmp_path / "checkpoint", plot=None)
    lines = result.summary().splitlines()
    assert lines[0].split() == ["before", "after", "gain"]
    assert lines[1].split() == ["accuracy", "(greedy)", "12%", "73%", "+61p"]
    assert lines[2].split() == ["accuracy", "(T=1)", "32%", "66%", "+34p"]
    assert lines[-1] == f"metrics: {tmp_path / 'metrics.jsonl'}"
    assert f"checkpoint: {tmp_path / 'checkpoint'}" in lines


def test_summary_rows_and_heading_are_the_callers(tmp_path: Path) -> None:
    result = FitResult(run_dir=tmp_path, history=[_eval(0, 0.5, 0.25), _eval(5, 0.25, 0.25)])
    table = result.summary({"sampled_accuracy": "sampled", "greedy_accuracy": "greedy"}, heading="execution")
    header, first, second = table.splitlines()[:3]
    assert header.startswith("execution") and header.split()[1:] == ["before", "after", "gain"]
    assert first.split() == ["sampled", "25%", "25%", "+0p"]
    assert second.split() == ["greedy", "50%", "25%", "-25p"]
    # columns line up whatever the label lengths
    assert len({len(line) for line in (header, first, second)}) == 1


def test_summary_without_evaluations_says_so(tmp_path: Path) -> None:
    result = FitResult(run_dir=tmp_path, history=[{"kind": "train", "step": 1, "reward": 0.0}])
    assert result.before is None and result.after is None
    assert result.summary() == "no evaluation was recorded"


def test_an_interrupted_run_says_where_to_continue_from(tmp_path: Path) -> None:
    run = tmp_path / "run-20250101-120000"
    history = [_eval(0, 0.25, 0.25), {"kind": "train", "step": 1, "reward": 0.4}]
    result = FitResult(run_dir=run, history=history, checkpoint=run / "checkpoint", interrupted=True)
    first, *rest = result.summary().splitlines()
    assert first == (
        f"interrupted: the last checkpoint is in {run / 'checkpoint'}; "
        f"Trainer(name='run-20250101-120000', run_root={str(tmp_path)!r}).fit(..., resume=True) continues"
    )
    assert rest[0].split() == ["before", "after", "gain"]
    early = FitResult(run_dir=run, interrupted=True)
    assert early.summary().splitlines() == [
        f"interrupted before the first checkpoint; the run folder is {run}",
        "no evaluation was recorded",
    ]
    assert FitResult(run_dir=run).message is None
