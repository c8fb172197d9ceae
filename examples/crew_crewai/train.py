"""Train the research crew of ``agent.py`` (unchanged) with tether: wrap it, check capture with
``Trainer.dev``, then a brief GRPO run of the embedded model on CPU that optimizes the writer only.

Run: ``python examples/crew_crewai/train.py`` (``--dev-only`` stops after the capture check; ``--model``
takes any OpenAI-compatible URL, ``"embedded"`` or ``"hf:<path>"``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tether

TOPICS = ["Paris", "Mars", "Python", "Everest", "Nile"]


def reward(task: dict[str, str], output: Any) -> float:
    """1 when the crew's final sentence states the fact the researcher's tool knows, else 0."""
    from agent import FACTS

    fact = FACTS.get(task["topic"].lower(), "")
    return float(bool(fact) and fact.rstrip(".").lower() in str(output).lower())


def wrapped() -> tether.WrappedAgent:
    from agent import crew  # the user's crew, unchanged

    return tether.wrap(crew, reward=reward, optimize=["writer"])


def tasks() -> list[dict[str, str]]:
    return [{"topic": topic} for topic in TOPICS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument(
        "--model",
        default="embedded",
        help='the model: "embedded", "hf:<path>", "vllm:<model>" or an OpenAI-compatible URL',
    )
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps")
    parser.add_argument("--dev-only", action="store_true", help="run Trainer.dev once and stop (no training)")
    parser.add_argument("--run-dir", default="runs/crew_crewai", help="where checkpoints and metrics go")
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing, e.g. all wrong)",
    )
    args = parser.parse_args(argv)

    agent = wrapped()
    report = tether.Trainer(model=args.model, sampling={"max_tokens": 32}).dev(agent, tasks()[:2])
    print(report)
    if args.dev_only:
        return 0
    trainer = tether.Trainer(
        model=args.model,
        algorithm=tether.GRPO(group_size=4, tasks_per_step=2),
        n_runners=4,
        steps=args.steps,
        eval_every=args.steps,
        run_root=args.run_dir,
        name="grpo",
        sampling={"max_tokens": 32},
    )
    try:
        result = trainer.fit(agent, train=tasks(), val=tasks()[:2], preflight=not args.no_preflight)
    except tether.FitError as exc:  # it would train nothing and says why: no traceback
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    if result.interrupted:
        print(result.summary())  # where the last checkpoint is and how to resume
        return 1
    print(f"before: {result.before}\nafter: {result.after}\ncheckpoint: {result.checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
