"""Train the chained-calculator agent with GRPO on the embedded model (CPU), crediting whole episodes or each
call.

1. Warm start (``tether.WarmStart``): the agent runs against a scripted teacher standing in for your API model
   (one calculator call per step, then the number; each step's operation often confused) and a fresh embedded
   model is fine-tuned on those rollouts' calls. Its own run, ``<run-root>/warmstart``, shared by every run
   under the same root (``--credit`` and ``--seed`` only change the GRPO part).
2. GRPO with ``tether.Trainer.fit``. Every calculator result is checked against the step it should be (the
   right operation on the agent's own result so far) and emitted with ``tether.emit_reward`` as 1 or 0 for
   the call that asked for it; the final reward is 1 for the right answer. ``--credit episode`` trains on the
   final reward alone (the emitted rewards are recorded, not used); ``--credit per_call`` gives each call its
   own return (its emitted reward plus the final one). Held-out accuracy (final answer right) is measured
   greedy before training and every ``--eval-every`` steps, and at T=1 before training and at the end;
   ``<run-dir>/curve.json`` holds it.

The agent function is unchanged: ``run=`` hands it an ``on_result`` callback that scores each step.

Run: ``python examples/chain_calc/train.py --credit per_call --seed 1`` (``--help`` lists the knobs);
``examples/chain_calc/compare.py`` runs both rules over several seeds and prints the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
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


def scripted_teacher(problems: list[data.Problem], p_correct: float, seed: int) -> Any:
    """An OpenAI-compatible server standing in for the user's API model (``tether.testing.fake_llm``): one
    calculator call per step on its last result, each step's operation right ``p_correct`` of the time (the
    same choices for a problem every time), then the number."""
    from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call

    by_question = {p.question: p for p in problems}

    def answer(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        asked = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        problem = by_question.get(asked)
        if problem is None:
            return text("I cannot solve that.")
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        k = len(results)
        if k >= len(problem.ops):
            return text(results[-1])
        ops = data.demonstration_ops(problem, random.Random(f"{seed}:{asked}"), p_correct)
        left = results[-1] if results else str(problem.numbers[0])
        return tool_call("calculator", {"expression": f"{left}{ops[k]}{problem.numbers[k + 1]}"})

    return FakeLLM(handler=answer)


def warm_start(agent_module: Any, root: Path, problems: list[data.Problem], args: argparse.Namespace) -> Path:
    """The warm-started checkpoint under ``root`` (``tether.WarmStart`` in its own run, ``<root>/warmstart``,
    built once, then the start of every run under it)."""
    from tether.models.embedded import EmbeddedBackend

    run = root / "warmstart"
    if (run / "checkpoint" / "trainer_state.json").exists():
        print(f"warm start: reusing {run / 'checkpoint'}")
        return run / "checkpoint"
    student = EmbeddedBackend(preset=args.preset, seed=0)  # fresh: WarmStart fits its tokenizer
    with scripted_teacher(problems, args.demo_accuracy, 0) as teacher:
        trainer = tether.Trainer(
            model=student,
            algorithm=tether.WarmStart(
                teacher=teacher.base_url,
                rollouts=len(problems),
                min_reward=0.0,  # every finished demonstration, right or wrong: the teacher is imperfect
                epochs=args.sft_epochs,
                lr=args.sft_lr,
                batch_size=args.sft_batch_size,
            ),
            n_runners=args.runners,
            name="warmstart",
            run_root=str(root),
        )
        try:
            result = trainer.fit(
                tether.wrap(agent_module.solve, reward=data.reward, run=step_runner()),
                train=[p.task() for p in problems],
            )
        finally:
            asyncio.run(student.close())
    record = next(h for h in result.history if h.get("kind") == "warmstart")
    print(
        f"warm start: {record['teacher_rollouts']} teacher rollouts, {record['teacher_reward']:.0%} answers right"
    )
    assert result.checkpoint is not None
    return result.checkpoint


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
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing)",
    )
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
        preflight=not args.no_preflight,
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
