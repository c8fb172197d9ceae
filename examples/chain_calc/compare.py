"""Compare ``credit="episode"`` with ``credit="per_call"`` on the chained-calculator task over several seeds.

Runs ``train.py`` for each rule and seed whose ``<run-root>/<credit>-s<seed>/curve.json`` is missing (one at a
time; all share the cached warm start), then prints, per metric (held-out accuracy greedy and at T=1):

- every run's curve (accuracy at each evaluation step) and the per-rule mean curve;
- each rule's final accuracy, mean ± standard deviation over seeds (and the range);
- the target: the ``episode`` runs' mean final accuracy; for each ``per_call`` run (and for the mean
  ``per_call`` curve) the first evaluation step at which it reaches the target, and that step as a share of
  the ``episode`` run's steps (≤ 60 % is the bar this comparison was built to test).

Run: ``python examples/chain_calc/compare.py`` (``--report-only`` prints what is there without training;
arguments after ``--`` go to ``train.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RULES = ("episode", "per_call")
METRICS = {"greedy": "held-out accuracy, greedy", "sampled": "held-out accuracy, T=1"}


def load(root: Path, rule: str, seeds: list[int]) -> list[dict[str, Any]]:
    runs = []
    for seed in seeds:
        path = root / f"{rule}-s{seed}" / "curve.json"
        if path.exists():
            runs.append(json.loads(path.read_text()))
    return runs


def first_reaching(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first evaluation step whose accuracy is at least ``target`` (None if none is)."""
    return next((step for step, value in curve if value >= target - 1e-9), None)


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1%} ± {sd:.1%} (range {min(values):.0%}–{max(values):.0%})"


def _points(run: dict[str, Any], metric: str) -> list[tuple[int, float]]:
    return [(int(p["step"]), float(p[metric])) for p in run["curve"] if p.get(metric) is not None]


def _mean_curve(runs: list[dict[str, Any]], metric: str) -> list[tuple[int, float]]:
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, value in _points(run, metric):
            by_step.setdefault(step, []).append(value)
    return [(step, statistics.mean(v)) for step, v in sorted(by_step.items()) if len(v) == len(runs)]


def training_reward(root: Path, rule: str, run: dict[str, Any], first: int, last: int) -> float | None:
    """The run's mean training reward (final answer right, sampled rollouts) over steps ``first``..``last``,
    from its ``metrics.jsonl`` (48 rollouts a step by default: a larger sample than the held-out set)."""
    path = root / f"{rule}-s{run['seed']}" / "metrics.jsonl"
    if not path.exists():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    values = [float(r["reward"]) for r in records if r.get("kind") == "train" and first <= r["step"] <= last]
    return statistics.mean(values) if values else None


def _training_lines(root: Path, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = ["", "## training reward (final answer right, T=1, mean over the steps' rollouts)", ""]
    for rule in RULES:
        for label, window in (("steps 1-4", (1, 4)), ("last 4 steps", None)):
            values = []
            for run in runs[rule]:
                total = int(run["steps"])
                first, last = window or (total - 3, total)
                value = training_reward(root, rule, run, first, last)
                if value is not None:
                    values.append(value)
            lines.append(f"- {rule}, {label}: {_mean_sd(values)}")
    return lines


def report(root: Path, seeds: list[int]) -> str:
    runs = {rule: load(root, rule, seeds) for rule in RULES}
    lines = [f"runs under {root}: " + ", ".join(f"{rule} × {len(runs[rule])}" for rule in RULES)]
    lines += _training_lines(root, runs)
    for metric, label in METRICS.items():
        lines += ["", f"## {label}", ""]
        steps = sorted({s for rule in RULES for r in runs[rule] for s, _ in _points(r, metric)})
        lines.append("| run | " + " | ".join(f"step {s}" for s in steps) + " |")
        lines.append("| --- |" + " --- |" * len(steps))
        for rule in RULES:
            for run in runs[rule]:
                values = dict(_points(run, metric))
                cells = [f"{values[s]:.0%}" if s in values else "" for s in steps]
                lines.append(f"| {rule} seed {run['seed']} | " + " | ".join(cells) + " |")
            mean = dict(_mean_curve(runs[rule], metric))
            if mean:
                lines.append(f"| **{rule} mean** | " + " | ".join(f"{mean.get(s, 0):.1%}" for s in steps) + " |")
        lines.append("")
        for rule in RULES:
            finals = [_points(r, metric)[-1][1] for r in runs[rule] if _points(r, metric)]
            starts = [_points(r, metric)[0][1] for r in runs[rule] if _points(r, metric)]
            lines.append(f"- {rule}: before {_mean_sd(starts)}; final {_mean_sd(finals)}")
        episode_finals = [_points(r, metric)[-1][1] for r in runs["episode"] if _points(r, metric)]
        if not episode_finals or not runs["per_call"]:
            continue
        target = statistics.mean(episode_finals)
        total = max(int(r["steps"]) for r in runs["episode"])
        lines.append(f"- target (episode mean final accuracy after {total} steps): {target:.1%}")
        per_call_starts = [_points(r, metric)[0][1] for r in runs["per_call"] if _points(r, metric)]
        if per_call_starts and target <= statistics.mean(per_call_starts) + 1e-9:
            lines.append(
                "  - the episode runs did not end above where the per_call runs started: reaching the target "
                "says nothing about speed; compare the final accuracies and the curves instead"
            )
        reached = []
        for run in runs["per_call"]:
            step = first_reaching(_points(run, metric), target)
            reached.append(step)
            share = f"{step / total:.0%} of {total}" if step is not None else "not reached"
            lines.append(f"  - per_call seed {run['seed']}: reaches it at step {step} ({share})")
        step = first_reaching(_mean_curve(runs["per_call"], metric), target)
        share = f"{step / total:.0%} of the episode run's steps" if step is not None else "not reached"
        lines.append(f"  - per_call mean curve: reaches it at step {step} ({share})")
        hit = [s / total for s in reached if s is not None]
        if hit:
            lines.append(
                f"  - share of steps over the {len(hit)} seed(s) that reach it: {_mean_sd(hit).split(' (')[0]}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-root", default="runs/chain")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES))
    parser.add_argument("--report-only", action="store_true", help="print the comparison of the runs there")
    parser.add_argument("train_args", nargs="*", help="after --: passed on to train.py")
    args = parser.parse_args(argv)
    root = Path(args.run_root)
    if not args.report_only:
        for seed in args.seeds:  # seed by seed, so that an interrupted comparison still has pairs
            for rule in args.rules:
                if (root / f"{rule}-s{seed}" / "curve.json").exists():
                    continue
                command = [sys.executable, str(HERE / "train.py"), "--credit", rule, "--seed", str(seed)]
                subprocess.run([*command, "--run-root", str(root), *args.train_args], check=True)
    print(report(root, args.seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
