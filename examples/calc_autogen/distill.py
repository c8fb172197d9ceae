"""Distillation against GRPO on the calculator demo, from the same warm start: held-out accuracy per CPU-minute.

1. **Warm start** (``tether.WarmStart``, as ``train.py``): the fresh embedded model fine-tuned on a scripted
   teacher's rollouts (right 40 % of the time); its checkpoint ``<run-dir>/warm/checkpoint`` is the start of both
   arms, so they share weights and tokenizer.
2. **GRPO** from the warm start for ``--steps`` steps, evaluating every ``--eval-every``: the RL arm. Its final
   checkpoint is the distillation teacher (a model a longer, costlier run produced).
3. **Distill** from the same warm start, ``--distill-steps`` steps, teacher = the GRPO checkpoint: the student
   samples, the teacher scores the student's tokens, no reward used (it is still evaluated).

Each arm's process CPU time (user + system, all threads: rollouts, proxy, updates, teacher) is sampled every
second, so every evaluation gets the CPU-minutes spent in that arm when it ran. Printed as one table.

Run: ``python examples/calc_autogen/distill.py --run-dir /tmp/distill-calc`` (``--help`` lists the knobs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402
from train import scripted_teacher  # noqa: E402

import tether  # noqa: E402


class CPUClock:
    """The process's CPU seconds (user + system, every thread) sampled each second against wall time."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CPUClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), time.process_time()))
            if self._stop.wait(1.0):
                self.samples.append((time.time(), time.process_time()))
                return

    def at(self, wall: float) -> float:
        """CPU seconds used by ``wall`` (the last sample before it)."""
        return max((cpu for t, cpu in self.samples if t <= wall), default=0.0)


def _arm(
    name: str, checkpoint: Path, algorithm: Any, args: argparse.Namespace, problems: Any, agent: Any
) -> tuple[list[dict[str, Any]], float, Path]:
    """Train from ``checkpoint``: the evaluations (each with its ``cpu_min``), the CPU-minutes, the checkpoint."""
    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=algorithm,
        n_runners=args.runners,
        steps=args.steps if name == "grpo" else args.distill_steps,
        eval_every=args.eval_every,
        seed=args.seed,
        name=name,
        run_root=args.run_dir,
        sampling={"max_tokens": 48},
    )
    with CPUClock() as clock:
        start = time.process_time()
        result = trainer.fit(
            tether.wrap(agent, reward=data.reward),
            train=[p.task() for p in problems["train"]],
            val=[p.task() for p in problems["test"]],
        )
    rows = [json.loads(line) for line in (Path(args.run_dir) / name / "metrics.jsonl").read_text().splitlines()]
    evals = [{**r, "cpu_min": (clock.at(r["time"]) - start) / 60} for r in rows if r.get("kind") == "eval"]
    assert result.checkpoint is not None
    return evals, (time.process_time() - start) / 60, result.checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/distill")
    parser.add_argument("--n-train", type=int, default=1000, help="training problems (and teacher rollouts)")
    parser.add_argument("--n-test", type=int, default=100, help="held-out problems")
    parser.add_argument("--sft-epochs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40, help="GRPO steps (its checkpoint is the teacher)")
    parser.add_argument("--distill-steps", type=int, default=20, help="Distill steps")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--distill-group-size", type=int, default=2, help="rollouts per task for Distill")
    parser.add_argument("--distill-lr", type=float, default=5e-4, help="Distill's learning rate")
    parser.add_argument(
        "--teacher", default=None, help="a teacher checkpoint: skip the GRPO arm and distill from it instead"
    )
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from agent import agent  # the user's AutoGen agent, unchanged

    from tether.models.embedded import EmbeddedBackend

    problems = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=args.seed)
    warm = Path(args.run_dir) / "warm" / "checkpoint"
    if not warm.exists():
        student = EmbeddedBackend(seed=args.seed)
        with scripted_teacher(problems["train"], 0.4, args.seed) as teacher:
            algorithm = tether.WarmStart(
                teacher=teacher.base_url, rollouts=args.n_train, min_reward=0.0, epochs=args.sft_epochs, lr=3e-3
            )
            trainer = tether.Trainer(
                model=student, algorithm=[algorithm], n_runners=args.runners, seed=args.seed, name="warm",
                run_root=args.run_dir, sampling={"max_tokens": 48},
            )  # fmt: skip
            try:
                trainer.fit(tether.wrap(agent, reward=data.reward), train=[p.task() for p in problems["train"]])
            finally:
                asyncio.run(student.close())
    grpo_evals, grpo_cpu, teacher_dir = [], 0.0, Path(args.teacher or ".")
    if args.teacher is None:
        grpo = tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step, lr=5e-4)
        grpo_evals, grpo_cpu, teacher_dir = _arm("grpo", warm, grpo, args, problems, agent)
    distill = tether.Distill(
        teacher=f"embedded:{teacher_dir}",
        group_size=args.distill_group_size,
        tasks_per_step=args.tasks_per_step * args.group_size // args.distill_group_size,
        lr=args.distill_lr,
    )
    distill_evals, distill_cpu, _ = _arm("distill", warm, distill, args, problems, agent)
    print("\nheld-out problems (never trained on), by arm and step; CPU-minutes spent in the arm at that point")
    print(f"{'arm':8} {'step':>4} {'CPU-min':>8} {'greedy':>7} {'T=1':>6}")
    for arm, evals in (("grpo", grpo_evals), ("distill", distill_evals)):
        for e in evals:
            accuracy = f"{e['greedy_accuracy']:7.0%} {e['sampled_accuracy']:6.0%}"
            print(f"{arm:8} {e['step']:4d} {e['cpu_min']:8.1f} {accuracy}")
    print(f"total CPU-minutes: grpo {grpo_cpu:.1f} (0: skipped, --teacher), distill {distill_cpu:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
