"""Train the triage agent (``agent.py``, unchanged) briefly with tether: GRPO on the embedded model, on CPU.

Every model call of the triage agent and of the specialist it hands off to goes to tether's endpoint;
``--optimize`` names the agents whose calls are trained (default: all three). The embedded model starts
untrained, so a short run shows the loop working end to end rather than a skilled agent; point ``--model``
at a stronger model (``hf:<path>``, ``vllm:<model>``) for real gains.

Run: ``python examples/triage_openai_agents/train.py --steps 4`` (``--help`` lists the knobs).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tether  # noqa: E402

WORDS = ["cat", "otter", "lantern", "pebble", "orbit", "maple", "violin", "harbor", "quartz", "meadow"]


def tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """Arithmetic questions for the math agent and letter counts for the words agent, with their answers."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2 == 0:
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            out.append({"question": f"What is {a} + {b}?", "answer": a + b})
        else:
            word = rng.choice(WORDS)
            out.append({"question": f"How many letters are in '{word}'?", "answer": len(word)})
    return out


def reward(task: dict[str, Any], output: Any) -> float:
    """1 when the final answer states the right number, else 0."""
    return float(str(task["answer"]) in str(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model", default="embedded", help='"embedded", "hf:<path>", "vllm:<model>" or a URL')
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--tasks-per-step", type=int, default=4, help="tasks per GRPO step")
    parser.add_argument("--max-tokens", type=int, default=48, help="most tokens one model call may generate")
    parser.add_argument("--optimize", nargs="*", default=None, help="agent names to train (default: all)")
    parser.add_argument("--run-root", default="runs", help="folder that holds the run folders")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing, e.g. all wrong)",
    )
    args = parser.parse_args(argv)

    from agent import triage_agent  # the user's agent, unchanged

    wrapped = tether.wrap(triage_agent, reward=reward, optimize=args.optimize or None)
    trainer = tether.Trainer(
        model=args.model,
        algorithm=tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step),
        steps=args.steps,
        eval_every=args.steps,
        seed=args.seed,
        name="triage_openai_agents",
        run_root=args.run_root,
        sampling={"max_tokens": args.max_tokens},
    )
    try:
        result = trainer.fit(
            wrapped, train=tasks(32, args.seed), val=tasks(8, args.seed + 1), preflight=not args.no_preflight
        )
    except tether.FitError as exc:  # it would train nothing and says why: no traceback
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    if result.interrupted:
        print(result.summary())  # where the last checkpoint is and how to resume
        return 1
    print(f"before: {result.before}\nafter:  {result.after}\nrun folder: {result.run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
