"""Train the OpenAI Agents SDK's customer-service agents (``agent.py``, the SDK's example unchanged) with no answer
key: a judge model scores each task's group of conversations (``tether.Judge``), and GRPO trains on its scores.

The tasks are what the example's customers ask: FAQ questions (baggage, wifi, seats on the plane) that the
triage agent hands to the FAQ agent, and seat changes with a confirmation number that it hands to the seat
booking agent. No task has an answer a function could check; the judge reads each conversation (the
messages, handoffs, tool calls and their results, the final reply) against ``RUBRIC``. ``--optimize`` names the
agents whose calls are trained (default: all three).

The judge is any ``model=`` string: an OpenAI-compatible URL (``--judge https://api.openai.com/v1
--judge-model gpt-4o-mini``, the key from ``$OPENAI_API_KEY``), or a local ``smollm2`` / ``hf:<path>`` (a
weak judge: see examples/calc_autogen/README.md). The embedded model starts untrained, so a short run shows
the loop working end to end rather than a skilled agent; point ``--model`` at a stronger model for real gains.

Run: ``python examples/customer_service_openai_agents/train.py --steps 4`` (``--help`` lists the knobs).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import agent  # noqa: E402  (the SDK's example, unchanged)

import tether  # noqa: E402

RUBRIC = (
    "The agent is an airline's customer service. Did it resolve the customer's request correctly? A question "
    "about the airline (baggage, wifi, seats) must be answered from the FAQ lookup tool's result, not made up; "
    "a seat change must call the update seat tool with the customer's own confirmation number and seat, and "
    "confirm the change to the customer. A wrong, invented or missing answer scores low; among attempts that "
    "resolve the request, fewer wasted turns and handoffs score higher."
)

FAQ_QUESTIONS = [
    "How many bags can I bring on the plane?",
    "What is the weight limit for my carry-on luggage?",
    "Is there wifi on the plane?",
    "How do I get internet access during the flight?",
    "How many seats are there on the plane?",
    "Which rows are the exit rows?",
    "What are the size limits for baggage?",
    "Do you have business class seats?",
]
SEAT_REQUESTS = [
    "My confirmation number is {code}. Please change my seat to {seat}.",
    "I'd like to move to seat {seat}. Confirmation number {code}.",
    "Can you update my seat to {seat}? My booking's confirmation number is {code}.",
]


def tasks(n: int, seed: int) -> list[str]:
    """Customer messages: FAQ questions and seat changes (with a confirmation number), alternating."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(n):
        if i % 2 == 0:
            out.append(rng.choice(FAQ_QUESTIONS))
        else:
            code = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
            seat = f"{rng.randint(1, 30)}{rng.choice('ABCDEF')}"
            out.append(rng.choice(SEAT_REQUESTS).format(code=code, seat=seat))
    return out


def judge(model: str, model_name: str | None = None, api_key: str | None = None) -> tether.Judge:
    """The reward: a judge model with the customer-service rubric (``api_key`` None: ``$OPENAI_API_KEY``)."""
    return tether.Judge(model=model, rubric=RUBRIC, model_name=model_name, api_key=api_key)


def wrapped(reward: Any, optimize: list[str] | None = None) -> tether.WrappedAgent:
    """The example's triage agent, unchanged, wrapped with ``reward`` (each rollout gets a fresh context)."""
    return tether.wrap(agent.triage_agent, reward=reward, optimize=optimize or None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model", default="embedded", help='the agent\'s model: "embedded", "hf:<path>", a URL')
    parser.add_argument(
        "--judge", default="https://api.openai.com/v1", help='the judge: an OpenAI-compatible URL, "smollm2", ...'
    )
    parser.add_argument("--judge-model", default="gpt-4o-mini", help="the model to ask for at the judge's URL")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task (the judge compares them)")
    parser.add_argument("--tasks-per-step", type=int, default=4, help="tasks per GRPO step")
    parser.add_argument("--max-tokens", type=int, default=48, help="most tokens one model call may generate")
    parser.add_argument("--optimize", nargs="*", default=None, help="agent names to train (default: all)")
    parser.add_argument("--run-root", default="runs", help="folder that holds the run folders")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run that would train nothing)",
    )
    args = parser.parse_args(argv)

    reward = judge(args.judge, args.judge_model if args.judge.startswith(("http://", "https://")) else None)
    trainer = tether.Trainer(
        model=args.model,
        algorithm=tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step),
        steps=args.steps,
        eval_every=args.steps,
        seed=args.seed,
        name="customer_service_openai_agents",
        run_root=args.run_root,
        sampling={"max_tokens": args.max_tokens},
    )
    try:
        result = trainer.fit(
            wrapped(reward, args.optimize),
            train=tasks(32, args.seed),
            val=tasks(4, args.seed + 1),
            preflight=not args.no_preflight,
        )
    except tether.FitError as exc:  # it would train nothing, or the judge is unreachable: says why
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0 if not result.interrupted else 1


if __name__ == "__main__":
    raise SystemExit(main())
