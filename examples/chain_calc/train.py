"""Train the chained-calculator agent with GRPO on the embedded model (CPU), crediting whole episodes or each
call.

1. Warm start: build the embedded model and fine-tune it on imperfect demonstrations in the agent's own
   format (one calculator call per step, then the number; each step's operation often confused). Cached in
   ``<run-root>/warmstart`` and shared by every run under the same root (``--credit`` and ``--seed`` only
   change the GRPO part).
2. GRPO with ``tether.Trainer.fit``. Every calculator result is checked against the step it should be (the
   right operation on the agent's own result so far) and emitted with ``tether.emit_reward`` as 1 or 0 for
   the call that asked for it; the final reward is 1 for the right answer. ``--credit episode`` trains on the
   final reward alone (the emitted rewards are recorded, not used); ``--credit per_call`` gives each call its
   own return (its emitted reward plus the final one). Held-out accuracy (final answer right, greedy and at
   T=1) is measured before training and every ``--eval-every`` steps; ``<run-dir>/curve.json`` holds it.

The agent function is unchanged: ``run=`` hands it an ``on_result`` callback that scores each step.

Run: ``python examples/chain_calc/train.py --credit per_call --seed 1`` (``--help`` lists the knobs);
``examples/chain_calc/compare.py`` runs both rules over several seeds and prints the comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402


def step_runner() -> Callable[[Any, dict[str, Any]], Any]:
    """``run=`` for ``tether.wrap``: runs the agent with an ``on_result`` callback that emits, for each
    calculator result, 1 if it is the right next step (``data.step_reward``) and 0 otherwise."""

    def run(agent_fn: Any, task: dict[str, Any]) -> Any:
        state = {"index": 0, "previous": float(task["numbers"][0])}

        def on_result(value: float | None) -> None:
            tether.emit_reward(data.step_reward(task, state["index"], state["previous"], value))
            state["index"] += 1
            if value is not None:
                state["previous"] = value

        return agent_fn(task, on_result=on_result)

    return run


def demonstrations(
    agent_module: Any, problems: list[data.Problem], p_correct: float, seed: int
) -> tuple[list[dict[str, Any]], float, float]:
    """Conversations in the agent's own format, the share of their steps that are right and the share of
    their final answers that are right."""
    rng = random.Random(seed)
    conversations, right_steps, steps, right_answers = [], 0, 0, 0
    for i, problem in enumerate(problems):
        task = problem.task()
        messages = agent_module.messages_for(task)
        value = float(problem.numbers[0])
        for k, op in enumerate(data.demonstration_ops(problem, rng, p_correct)):
            expression = f"{agent_module.show(value)}{op}{problem.numbers[k + 1]}"
            result = agent_module.calculator(expression)
            right_steps += data.step_reward(task, k, value, result) == 1.0
            steps += 1
            messages += [
                _call(f"call_{i}_{k}", expression),
                {"role": "tool", "tool_call_id": f"call_{i}_{k}", "content": agent_module.show(result)},
            ]
            value = result
        messages.append({"role": "assistant", "content": agent_module.show(value)})
        right_answers += data.reward(task, agent_module.show(value)) == 1.0
        conversations.append({"messages": messages, "tools": agent_module.TOOLS})
    return conversations, right_steps / steps, right_answers / len(problems)


def _call(call_id: str, expression: str) -> dict[str, Any]:
    function = {"name": "calculator", "arguments": json.dumps({"expression": expression})}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def warm_start(agent_module: Any, root: Path, problems: list[data.Problem], args: argparse.Namespace) -> Path:
    """The warm-started checkpoint under ``root`` (built once, then reused by every run under it)."""
    from tether.models.embedded import create_embedded, sft

    checkpoint = root / "warmstart"
    info_path = checkpoint / "warmstart.json"
    if info_path.exists():
        print(f"warm start: reusing {checkpoint} ({info_path.read_text().strip()})")
        return checkpoint
    demos, step_accuracy, answer_accuracy = demonstrations(agent_module, problems, args.demo_accuracy, 0)
    corpus = [json.dumps(d["messages"]) for d in demos[:200]] + [json.dumps(agent_module.TOOLS)]
    model = create_embedded(corpus, preset=args.preset, seed=0)
    print(
        f"warm start: {model.num_params / 1e6:.2f}M-parameter model, {len(demos)} demonstrations "
        f"({step_accuracy:.0%} of steps right, {answer_accuracy:.0%} of answers right)"
    )
    started = time.perf_counter()
    sft(
        model, demos, epochs=args.sft_epochs, lr=args.sft_lr, batch_size=args.sft_batch_size, seed=0, progress=True
    )
    model.save(checkpoint)
    info = {
        "demo_step_accuracy": round(step_accuracy, 3),
        "demo_answer_accuracy": round(answer_accuracy, 3),
        "seconds": round(time.perf_counter() - started, 1),
    }
    info_path.write_text(json.dumps(info))
    return checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument(
        "--credit",
        choices=["episode", "per_call"],
        default="episode",
        help="episode: each call gets the rollout's reward; per_call: each call gets its return",
    )
    parser.add_argument("--gamma", type=float, default=None, help="per_call discount (default: the trainer's)")
    parser.add_argument("--seed", type=int, default=0, help="GRPO seed (the problems and warm start are fixed)")
    parser.add_argument("--run-root", default="runs/chain", help="the shared warm start and the runs")
    parser.add_argument("--name", default=None, help="run folder (default <credit>-s<seed>)")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps")
    parser.add_argument("--eval-every", type=int, default=4, help="evaluate on the held-out tasks every N steps")
    parser.add_argument("--tasks-per-step", type=int, default=6, help="tasks per GRPO step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--lr", type=float, default=5e-4, help="GRPO learning rate")
    parser.add_argument("--runners", type=int, default=32, help="rollouts run concurrently")
    parser.add_argument("--n-train", type=int, default=1600, help="training problems (demonstrations, GRPO)")
    parser.add_argument("--n-test", type=int, default=50, help="held-out problems for the accuracy curve")
    parser.add_argument("--demo-accuracy", type=float, default=0.5, help="how often a demonstrated step is right")
    parser.add_argument("--sft-epochs", type=int, default=6, help="epochs of the warm-start fine-tuning")
    parser.add_argument("--sft-batch-size", type=int, default=16, help="batch size of the warm start")
    parser.add_argument("--sft-lr", type=float, default=3e-3, help="learning rate of the warm start")
    parser.add_argument("--preset", default="tiny", help="size preset of the embedded model")
    parser.add_argument("--warm-start-only", action="store_true", help="build the warm start and stop")
    parser.add_argument("--resume", action="store_true", help="continue the run (e.g. to a larger --steps)")
    args = parser.parse_args(argv)

    import agent  # the user's plain-OpenAI agent, unchanged

    root = Path(args.run_root)
    root.mkdir(parents=True, exist_ok=True)
    problems = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=0)
    checkpoint = warm_start(agent, root, problems["train"], args)
    if args.warm_start_only:
        return 0
    credit: dict[str, Any] = {"credit": args.credit}
    if args.gamma is not None:
        credit["gamma"] = args.gamma
    name = args.name or f"{args.credit}-s{args.seed}"
    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step, lr=args.lr),
        n_runners=args.runners,
        steps=args.steps,
        eval_every=args.eval_every,
        seed=args.seed,
        name=name,
        run_root=str(root),
        sampling={"max_tokens": 24},
        **credit,
    )
    wrapped = tether.wrap(agent.solve, reward=data.reward, run=step_runner())
    started = time.perf_counter()
    result = trainer.fit(
        wrapped,
        train=[p.task() for p in problems["train"]],
        val=[p.task() for p in problems["test"]],
        resume=args.resume,
    )
    seconds = time.perf_counter() - started
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines() if line]
    curve = [  # (from the metrics file, so that a resumed run's curve starts at step 0)
        {"step": e["step"], "greedy": e.get("greedy_accuracy"), "sampled": e.get("sampled_accuracy")}
        for e in records
        if e.get("kind") == "eval"
    ]
    record = {"credit": args.credit, "seed": args.seed, "steps": args.steps, "seconds": round(seconds, 1)}
    (result.run_dir / "curve.json").write_text(json.dumps({**record, "curve": curve}, indent=1))
    print(f"\nheld-out problems: {len(problems['test'])} (never trained on); credit={args.credit}")
    print(result.summary({"greedy_accuracy": "answer right (greedy)", "sampled_accuracy": "answer right (T=1)"}))
    print(f"curve: {result.run_dir / 'curve.json'} ({seconds:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
