"""Train the AutoGen calculator agent with the embedded model on CPU: the code behind ``tether demo``.

1. Capture the exact request the agent sends (system message, tool schema) by running it once against a
   scripted stand-in model, so the warm-start demonstrations look exactly like the agent's real prompts.
2. Warm start: build the embedded model and fine-tune it on imperfect demonstrations (right format,
   often the wrong operation). Cached in the run folder.
3. GRPO with ``tether.Trainer.fit``, evaluating on held-out problems before, during and after.

Run: ``python examples/calc_autogen/train.py`` (or ``tether demo``); ``--help`` lists the knobs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402


def capture_request_shape(agent: Any) -> dict[str, Any]:
    """The messages and tools of the agent's first model call, captured through tether."""
    from tether.models.remote import RemoteBackend
    from tether.testing.fake_llm import FakeLLM, tool_call

    async def _capture() -> dict[str, Any]:
        async with FakeLLM(handler=lambda request: tool_call("calculator", {"expression": "1+1"})) as llm:
            backend = RemoteBackend(llm.base_url)
            try:
                report = await tether.Trainer(model=backend).adev(tether.wrap(agent), [{"question": "PROBE"}])
            finally:
                await backend.close()
        (rollout,) = report.rollouts
        if not rollout.spans:
            raise RuntimeError(f"could not capture the agent's request:\n{rollout}")
        request = rollout.spans[0].attributes["request"]
        return {"messages": request["messages"], "tools": request["tools"]}

    return asyncio.run(_capture())


def demonstrations(
    shape: dict[str, Any], problems: list[data.Problem], p_correct: float, seed: int
) -> tuple[list[dict[str, Any]], float]:
    """Warm-start conversations in the agent's own prompt format, and the demonstrations' accuracy."""
    rng = random.Random(seed)
    conversations, correct = [], 0
    for i, problem in enumerate(problems):
        expression = data.demonstration_expression(problem, rng, p_correct)
        correct += data.reward(problem.task(), eval(expression)) == 1.0
        messages = [_with_question(m, problem.question) for m in shape["messages"]]
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        conversations.append({"messages": messages, "tools": shape["tools"]})
    return conversations, correct / len(problems)


def _with_question(message: dict[str, Any], question: str) -> dict[str, Any]:
    if message.get("role") == "user":
        return {**message, "content": str(message["content"]).replace("PROBE", question)}
    return dict(message)


def warm_start(
    agent: Any, run_dir: Path, problems: list[data.Problem], args: argparse.Namespace
) -> tuple[Path, float]:
    """The warm-started checkpoint (built once, then reused) and the demonstrations' accuracy."""
    from tether.models.embedded import create_embedded, sft

    checkpoint = run_dir / "warmstart"
    info_path = checkpoint / "warmstart.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        print(f"warm start: reusing {checkpoint} (demonstrations {info['demo_accuracy']:.0%} accurate)")
        return checkpoint, float(info["demo_accuracy"])
    shape = capture_request_shape(agent)
    demos, demo_accuracy = demonstrations(shape, problems, args.demo_accuracy, args.seed)
    corpus = [p.question for p in problems] + [json.dumps(shape["tools"]), str(shape["messages"])]
    model = create_embedded(corpus, preset=args.preset, seed=args.seed)
    print(
        f"warm start: {model.num_params / 1e6:.2f}M-parameter model, {len(demos)} demonstrations "
        f"({demo_accuracy:.0%} choose the right operation)"
    )
    started = time.perf_counter()
    sft(model, demos, epochs=args.sft_epochs, lr=args.sft_lr, batch_size=32, seed=args.seed, progress=True)
    model.save(checkpoint)
    info_path.write_text(json.dumps({"demo_accuracy": demo_accuracy, "seconds": time.perf_counter() - started}))
    return checkpoint, demo_accuracy


#: what --quick changes: a run of about a minute on a laptop CPU (the numbers mean little at this size)
QUICK: dict[str, Any] = {
    "run_dir": "runs/demo-quick",
    "steps": 4,
    "eval_every": 2,
    "tasks_per_step": 4,
    "group_size": 4,
    "n_train": 128,
    "n_test": 16,
    "sft_epochs": 2,
    "runners": 8,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--run-dir", default="runs/demo", help="where the warm start, checkpoints and metrics go")
    parser.add_argument("--steps", type=int, default=160, help="GRPO steps")
    parser.add_argument("--eval-every", type=int, default=40, help="evaluate on the held-out tasks every N steps")
    parser.add_argument("--tasks-per-step", type=int, default=16, help="tasks per GRPO step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--lr", type=float, default=5e-4, help="GRPO learning rate")
    parser.add_argument("--n-train", type=int, default=2000, help="training problems (demonstrations, GRPO)")
    parser.add_argument("--n-test", type=int, default=100, help="held-out problems for the before/after numbers")
    parser.add_argument("--demo-accuracy", type=float, default=0.4, help="how often demonstrations are right")
    parser.add_argument("--sft-epochs", type=int, default=8, help="epochs of the warm-start fine-tuning")
    parser.add_argument("--sft-lr", type=float, default=3e-3, help="learning rate of the warm start")
    parser.add_argument("--preset", default="tiny", help="size preset of the embedded model")
    parser.add_argument("--runners", type=int, default=16, help="rollouts run concurrently")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in its folder (e.g. to a larger --steps)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run that finishes in about a minute (flags given explicitly still win); "
        f"sets {', '.join(f'--{k.replace(chr(95), chr(45))} {v}' for k, v in QUICK.items())}",
    )
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)

    run_dir = Path(args.run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"error: --run-dir {args.run_dir}: cannot create it ({exc.strerror or exc})") from None

    from agent import agent  # the user's AutoGen agent, unchanged

    problems = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=args.seed)
    checkpoint, demo_accuracy = warm_start(agent, run_dir, problems["train"], args)

    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step, lr=args.lr),
        n_runners=args.runners,
        steps=args.steps,
        eval_every=args.eval_every,
        seed=args.seed,
        name="grpo",
        run_root=str(run_dir),
        sampling={"max_tokens": 48},
    )
    wrapped = tether.wrap(agent, reward=data.reward)
    result = trainer.fit(
        wrapped,
        train=[p.task() for p in problems["train"]],
        val=[p.task() for p in problems["test"]],
        resume=args.resume,
    )
    _summary(result, demo_accuracy, len(problems["test"]))
    return 0


def _summary(result: Any, demo_accuracy: float, n_test: int) -> None:
    if not result.evals:
        print(result.summary())  # says no evaluation was recorded
        return
    print(f"\nheld-out problems: {n_test} (never trained on)")
    print(f"demonstrations used for the warm start: {demo_accuracy:.0%} right")
    rows = {
        "greedy_accuracy": "accuracy (greedy)",
        "sampled_accuracy": "accuracy (T=1)",
        "greedy_tool_rate": "tool called (greedy)",
    }
    print(result.summary(rows))


if __name__ == "__main__":
    raise SystemExit(main())
