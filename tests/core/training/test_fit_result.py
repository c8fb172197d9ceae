"""FitResult: the first and last evaluation, and the before/after table the examples print."""

from __future__ import annotations

import json
from pathlib import Path

from tether.training.run.result import FitResult


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
    # records without per-task rewards: the gain cannot be told from noise, and the table says so
    assert lines[1].split()[:5] == ["accuracy", "(greedy)", "12%", "73%", "+61p"]
    assert lines[2].split()[:5] == ["accuracy", "(T=1)", "32%", "66%", "+34p"]
    assert lines[1].endswith("(no per-task rewards: noise unknown)")
    assert lines[-1] == f"metrics: {tmp_path / 'metrics.jsonl'}"
    assert f"checkpoint: {tmp_path / 'checkpoint'}" in lines


def test_the_t1_row_pairs_the_evaluations_that_sampled_and_the_kv_cache_gets_a_line(tmp_path: Path) -> None:
    greedy_only = {"kind": "eval", "step": 10, "greedy_accuracy": 0.9}  # during a run: no T=1 pass
    kv = {"kv_calls": 8.0, "kv_hits": 6.0, "kv_reused": 0.5, "kv_reused_tokens": 300.0, "kv_prompt_tokens": 600.0}
    history = [
        _eval(0, 0.12, 0.32),
        {"kind": "train", "step": 1, "reward": 0.4, **kv},
        {"kind": "train", "step": 2, "reward": 0.4, **kv, "kv_reused_tokens": 500.0, "kv_prompt_tokens": 600.0},
        greedy_only,
    ]
    lines = FitResult(run_dir=tmp_path, history=history).summary().splitlines()
    assert lines[1].split()[:5] == ["accuracy", "(greedy)", "12%", "90%", "+78p"]
    assert lines[2].split()[:5] == ["accuracy", "(T=1)", "32%", "32%", "+0p"]  # the one evaluation that sampled
    assert lines[4] == (  # after the table, with where the run's files are
        "KV cache across turns: 67% of prompt tokens reused (12 of 16 calls started from an earlier turn)"
    )


def test_summary_rows_and_heading_are_the_callers(tmp_path: Path) -> None:
    result = FitResult(run_dir=tmp_path, history=[_eval(0, 0.5, 0.25), _eval(5, 0.25, 0.25)])
    table = result.summary({"sampled_accuracy": "sampled", "greedy_accuracy": "greedy"}, heading="execution")
    header, first, second = table.splitlines()[:3]
    assert header.startswith("execution") and header.split()[1:] == ["before", "after", "gain"]
    assert first.split() == ["sampled", "25%", "25%", "+0p"]
    assert second.split()[:4] == ["greedy", "50%", "25%", "-25p"]
    # columns line up whatever the label lengths
    assert len(first) == len(header) and second[: len(header)].endswith("-25p")


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


def _eval_tasks(step: int, greedy: list[float], sampled: list[float]) -> dict[str, object]:
    """An eval record as GRPO writes it: the accuracies and each held-out task's reward."""
    return {
        **_eval(step, sum(greedy) / len(greedy), sum(sampled) / len(sampled)),
        "greedy_rewards": greedy,
        "sampled_rewards": sampled,
    }


def test_a_gain_inside_noise_says_so_with_the_sample_size_and_intervals(tmp_path: Path) -> None:
    # the demo's 2-step run: 0 % -> 10 % on 10 held-out tasks
    before = _eval_tasks(0, [0.0] * 10, [0.0] * 10)
    after = _eval_tasks(2, [0.0] * 10, [1.0] + [0.0] * 9)
    lines = FitResult(run_dir=tmp_path, history=[before, after]).summary().splitlines()
    assert lines[0].startswith("held-out tasks: 10 ")
    sampled = next(line for line in lines if line.startswith("accuracy (T=1)"))
    assert sampled.split()[2:] == ["0%", "[0–28]", "10%", "[2–40]", "+10p", "[-10,", "+30]", "within", "noise"]
    greedy = next(line for line in lines if line.startswith("accuracy (greedy)"))
    assert greedy.split()[-3:] == ["+0p", "[+0,", "+0]"]


def test_a_gain_well_above_noise_is_plain(tmp_path: Path) -> None:
    history = [_eval_tasks(0, [0.0] * 20, [0.0] * 20), _eval_tasks(9, [1.0] * 18 + [0.0] * 2, [1.0] * 20)]
    table = FitResult(run_dir=tmp_path, history=history).summary()
    assert "within noise" not in table
    assert "+90p [+77, +100]" in table and "90% [70–97]" in table


def test_a_run_that_trained_nothing_says_no_update_happened_and_names_its_failures(tmp_path: Path) -> None:
    idle = "every group scored the same (4 of 4 flat): rewards must vary"
    history = [
        _eval_tasks(0, [0.0, 1.0], [0.0, 1.0]),
        {"kind": "train", "step": 1, "reward": 0.0, "trained": 0, "idle": idle},
        {"kind": "train", "step": 2, "reward": 0.0, "trained": 0, "idle": idle},
        _eval_tasks(2, [0.0, 1.0], [1.0, 1.0]),
    ]
    rows = ["ValueError: bad", "KeyError: 'x'", "KeyError: 'x'"]
    (tmp_path / "failures.jsonl").write_text(
        "".join(
            json.dumps({"rollout_id": f"ro-{i}", "error": f"Traceback ...\n{e}"}) + "\n"
            for i, e in enumerate(rows)
        )
    )
    table = FitResult(run_dir=tmp_path, history=history).summary()
    assert f"no update happened: none of the 2 steps trained anything ({idle})" in table
    assert "failed rollouts: 3" in table and "commonest: KeyError: 'x' (x2); ValueError: bad (x1)" in table
    trained = [*history[:2], {**history[2], "trained": 24}, history[3]]
    assert "no update happened" not in FitResult(run_dir=tmp_path, history=trained).summary()
