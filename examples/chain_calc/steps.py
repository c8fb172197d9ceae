"""Held-out step accuracy of the warm start and of each run's last checkpoint: for every step position, how
often the calculator result was the right next step (the rewards ``train.py`` emits), greedy.

This shows *where* each credit rule changed the model (first, second or third step), which the final-answer
accuracy alone does not.

Run after ``compare.py``: ``python examples/chain_calc/steps.py`` (same ``--run-root`` and ``--seeds``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402
import train  # noqa: E402

import tether  # noqa: E402


def step_accuracy(checkpoint: Path, tasks: list[dict[str, Any]]) -> tuple[list[float], float]:
    """Per step position, the share of held-out rollouts (greedy) whose result there was right (a rollout
    that stopped before a step counts as wrong there); and the share of right final answers."""
    import agent

    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        sampling={"max_tokens": 24, "temperature": 0.0},
        n_runners=25,
        progress=False,
    )
    report = trainer.dev(tether.wrap(agent.solve, reward=data.reward, run=train.step_runner()), tasks)
    right = [[0, 0] for _ in range(3)]
    for rollout in report.rollouts:
        emitted = [
            s.attributes[tether.spans.REWARD_VALUE] for s in rollout.spans if s.kind == tether.SpanKind.REWARD
        ]
        for k in range(len(rollout.rollout.input["ops"])):
            right[k][0] += k < len(emitted) and emitted[k] == 1.0
            right[k][1] += 1
    final = statistics.mean(float(r.rollout.reward or 0.0) for r in report.rollouts)
    return [hit / n for hit, n in right if n], final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-root", default="runs/chain")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--n-test", type=int, default=50)
    args = parser.parse_args(argv)
    root = Path(args.run_root)
    tasks = [p.task() for p in data.splits(n_train=1600, n_val=0, n_test=args.n_test, seed=0)["test"]]
    print("| model | step 1 right | step 2 right | step 3 right | answer right |")
    print("| --- | --- | --- | --- | --- |")
    rows: list[tuple[str, Path]] = [("warm start", root / "warmstart")]
    rows += [
        (f"{rule} seed {s}", root / f"{rule}-s{s}" / "checkpoint")
        for rule in ("episode", "per_call")
        for s in args.seeds
    ]
    for label, checkpoint in rows:
        if not (checkpoint / "model.safetensors").exists():
            continue
        steps, final = step_accuracy(checkpoint, tasks)
        cells = " | ".join(f"{v:.0%}" for v in steps)
        print(f"| {label} | {cells} | {final:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
