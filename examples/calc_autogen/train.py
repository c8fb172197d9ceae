"""Train the AutoGen calculator agent on CPU: the code behind ``tether demo``.

1. Warm start (``tether.WarmStart``): the agent runs against a teacher, here a scripted stand-in for your API
   model (``tether.testing.fake_llm``) that calls the calculator in the right format but often with the wrong
   operation; the student is fine-tuned on those rollouts' calls.
2. GRPO, in the same run (``Trainer(algorithm=[WarmStart, GRPO])``), evaluating on held-out problems before
   the warm start, after it, during and after training.

The student is the embedded model (fresh, its tokenizer fitted to the teacher's traffic, all weights trained)
or, with ``--model smollm2``, SmolLM2-135M-Instruct (``model="smollm2"``), pretrained, trained through LoRA
adapters in both stages, writing its calls in its own ``<tool_call>`` format; that preset's teacher is right
60 % of the time, mostly wrong where the words mean - or /.

Run: ``python examples/calc_autogen/train.py`` (or ``tether demo``, ``tether demo --model smollm2``);
``--help`` lists the knobs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call  # noqa: E402

DEFAULT_LR = 5e-4  # GRPO's learning rate (--lr)


def scripted_teacher(problems: list[data.Problem], p_correct: float | dict[str, float], seed: int) -> FakeLLM:
    """An OpenAI-compatible server standing in for the user's API model: it calls the calculator with the
    problem's numbers and, ``p_correct`` of the time, the right operation (the same choice for a question
    every time it is asked)."""
    by_question = {p.question: p for p in problems}

    def answer(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            return text(str(messages[-1].get("content")))
        asked = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        problem = by_question.get(asked.strip()) or next((p for q, p in by_question.items() if q in asked), None)
        if problem is None:
            return text("I cannot solve that.")
        rng = random.Random(f"{seed}:{problem.question}")
        return tool_call("calculator", {"expression": data.demonstration_expression(problem, rng, p_correct)})

    return FakeLLM(handler=answer)


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

#: what --model smollm2 changes (flags given explicitly still win): SmolLM2-135M-Instruct, pretrained, learns
#: through LoRA adapters on its last 10 of 30 layers (the backward pass stops there); its demonstrations are right
#: 60 % of the time; 6 steps of 8 problems x 8 and greedy-only evaluations fit a CPU (see the README for the
#: three seeds' CPU-minutes and gains; 10 steps of 4 problems x 8 were tried and collapsed); 8-row passes, so a
#: GRPO group's 8 rows compute their shared prompt once (docs/grpo.md, "Shared prompt prefixes")
SMOLLM2: dict[str, Any] = {
    "run_dir": "runs/demo-smollm2",
    "steps": 6,
    "eval_every": 6,
    "eval_sampled": "never",  # greedy evaluations only: the T=1 passes of long replies cost ~a tenth of the run
    "tasks_per_step": 8,
    "group_size": 8,
    "lr": 1e-3,
    "n_train": 96,
    "n_test": 64,
    "demo_accuracy": "+=0.9,-=0.3,*=0.9,/=0.3",  # 60 % right, wrong mostly where the words say - or /
    "sft_batch": 8,
    "micro_batch": 8,  # rows per forward/backward pass: one group, its prompt computed once (3.7 GB peak)
    "sft_epochs": 1,
    "sft_lr": 1e-3,
    "lora_layers": 10,
    "runners": 64,
    "max_tokens": 48,
}


def _flags(preset: dict[str, Any]) -> str:
    """A preset as the command-line flags it stands for (for --help)."""
    return ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in preset.items())


def parse_settings(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line with its presets applied (--model smollm2, then --quick): a flag given wins over a
    preset, even when it is given at its default value."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--run-dir", default="runs/demo", help="where the checkpoints, metrics and curve go")
    parser.add_argument("--steps", type=int, default=70, help="GRPO steps")
    parser.add_argument("--eval-every", type=int, default=35, help="evaluate on the held-out tasks every N steps")
    parser.add_argument("--tasks-per-step", type=int, default=16, help="tasks per GRPO step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help="GRPO learning rate")
    parser.add_argument("--n-train", type=int, default=2000, help="training problems (demonstrations, GRPO)")
    parser.add_argument("--n-test", type=int, default=100, help="held-out problems for the before/after numbers")
    parser.add_argument(
        "--demo-accuracy",
        default="0.4",
        help='how often the teacher is right: one rate, or one per operation ("+=0.9,-=0.3,*=0.9,/=0.3")',
    )
    parser.add_argument("--sft-epochs", type=int, default=6, help="epochs of the warm-start fine-tuning")
    parser.add_argument("--sft-lr", type=float, default=3e-3, help="learning rate of the warm start")
    parser.add_argument("--sft-batch", type=int, default=32, help="rows per optimizer step of the warm start")
    parser.add_argument(
        "--micro-batch", type=int, default=32, help="rows per forward/backward pass, both stages (memory)"
    )
    parser.add_argument(
        "--model",
        choices=("embedded", "smollm2"),
        default="embedded",
        help="the student: the embedded model (fresh, full weights) or SmolLM2-135M-Instruct "
        f'(model="smollm2", LoRA adapters; sets {_flags(SMOLLM2)})',
    )
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (--model smollm2)")
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=0,
        help="LoRA adapters on the last N decoder layers only (0: all); fewer make each update cheaper",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads of the student (1 on a busy machine)",
    )
    parser.add_argument("--max-tokens", type=int, default=48, help="most tokens one model call may generate")
    parser.add_argument(
        "--distill",
        metavar="TEACHER",
        default=None,
        help="after the warm start, tether.Distill from TEACHER (a model= string, e.g. hf:<an earlier demo run's "
        "checkpoint>) instead of GRPO: same rollouts a step, no reward used in training",
    )
    parser.add_argument(
        "--eval-sampled",
        choices=["ends", "every", "never"],
        default="ends",
        help="when an evaluation adds the T=1 pass to the greedy one (Trainer(eval_sampled=))",
    )
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
        f"sets {_flags(QUICK)}",
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing, e.g. all wrong)",
    )
    args = parser.parse_args(argv)
    # the flags given, even at their default value (argparse fills a default only where the namespace lacks it)
    unset = object()
    given = parser.parse_args(argv, namespace=argparse.Namespace(**{name: unset for name in vars(args)}))
    explicit = {name for name, value in vars(given).items() if value is not unset}
    lora_only = sorted(explicit & {"rank", "lora_layers"})
    if args.model != "smollm2" and lora_only:  # the embedded student trains all its weights: no adapters
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in lora_only)
        parser.error(
            f"{flags}: LoRA settings apply to --model smollm2 (the embedded model trains all its weights)"
        )
    presets = [SMOLLM2] * (args.model == "smollm2") + [QUICK] * args.quick  # the later wins
    for preset in presets:
        for name, value in preset.items():
            if name not in explicit:
                setattr(args, name, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_settings(argv)
    run_dir = Path(args.run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"error: --run-dir {args.run_dir}: cannot create it ({exc.strerror or exc})") from None

    from agent import agent  # the user's AutoGen agent, unchanged

    problems = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=args.seed)
    student, lora = _student(args)
    with scripted_teacher(problems["train"], data.demo_accuracy(args.demo_accuracy), args.seed) as teacher:
        warm_start = tether.WarmStart(
            teacher=teacher.base_url,
            rollouts=args.n_train,
            min_reward=0.0,  # every finished demonstration, right or wrong: the teacher is imperfect
            epochs=args.sft_epochs,
            lr=args.sft_lr,
            batch_size=args.sft_batch,
            micro_batch=min(args.sft_batch, args.micro_batch),
            lora=lora,
        )
        trainer = tether.Trainer(
            model=student,
            algorithm=[
                warm_start,
                _second_stage(args, lora),
            ],
            n_runners=args.runners,
            steps=args.steps,
            eval_every=args.eval_every,
            eval_sampled=args.eval_sampled,
            seed=args.seed,
            name="run",
            run_root=str(run_dir),
            sampling={"max_tokens": args.max_tokens},
        )
        try:
            result = trainer.fit(
                tether.wrap(agent, reward=data.reward),
                train=[p.task() for p in problems["train"]],
                val=[p.task() for p in problems["test"]],
                resume=args.resume,
                preflight=not args.no_preflight,
            )
        except tether.FitError as exc:  # it trained nothing and says why: no traceback
            print(f"training stopped: {exc}", file=sys.stderr)
            return 1
        finally:
            asyncio.run(student.close())
    summary(result)
    return 0


def _second_stage(args: argparse.Namespace, lora: tether.LoRA | None) -> tether.GRPO:
    """GRPO on the reward, or with ``--distill`` on-policy distillation from that teacher: the same rollouts a step
    (groups of 2: Distill compares no group), the same learning rate and adapters."""
    if args.distill:
        return tether.Distill(
            teacher=args.distill,
            group_size=2,
            tasks_per_step=args.tasks_per_step * args.group_size // 2,
            lr=args.lr,
            lora=lora,
            micro_batch=args.micro_batch,
        )
    return tether.GRPO(
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        lr=args.lr,
        lora=lora,
        micro_batch=args.micro_batch,
    )


def _student(args: argparse.Namespace) -> tuple[Any, tether.LoRA | None]:
    """The model to train and its LoRA adapters: a fresh embedded model (WarmStart fits its tokenizer to the
    teacher's traffic) trained in full, or SmolLM2-135M-Instruct trained through adapters."""
    if args.model == "smollm2":
        from tether.models import open_backend

        layers = args.lora_layers or None
        return open_backend(f"smollm2?threads={args.threads}"), tether.LoRA(
            r=args.rank, alpha=2 * args.rank, layers=layers
        )
    from tether.models.embedded import EmbeddedBackend

    return EmbeddedBackend(preset=args.preset, seed=args.seed, threads=args.threads), None


def summary(result: Any) -> None:
    """The before/after table, with the warm start's teacher and its result on their own lines."""
    if not result.evals:
        print(result.summary())  # says no evaluation was recorded
        return
    teacher = next((h for h in result.history if h.get("kind") == "warmstart"), None)
    warm = [h for h in result.evals if h.get("stage") == "warmstart"]
    print("\nheld-out problems: never trained on")
    if teacher is not None:
        print(
            f"warm start: {teacher['teacher_rollouts']} teacher rollouts, {teacher['teacher_reward']:.0%} right, "
            f"{teacher['kept']} kept"
        )
    if warm:
        sampled = warm[-1].get("sampled_accuracy")  # absent with --eval-sampled never
        print(
            f"after the warm start alone: accuracy {warm[-1]['greedy_accuracy']:.0%} greedy"
            + (f", {sampled:.0%} T=1" if sampled is not None else "")
        )
    rows = {
        "greedy_accuracy": "accuracy (greedy)",
        "sampled_accuracy": "accuracy (T=1)",
        "greedy_tool_rate": "tool called (greedy)",
    }
    print(result.summary(rows))


if __name__ == "__main__":
    raise SystemExit(main())
