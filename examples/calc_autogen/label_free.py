"""The calculator demo with no labels in training: ``reward=tether.MajorityVote(...)``, or ``tether.Judge`` backed
by a scripted judge of a chosen accuracy (docs/judge.md).

1. Warm start (``tether.WarmStart``), as in ``train.py``: the scripted teacher's demonstrations, every one kept
   (``min_reward=0``: no label decides what is kept).
2. GRPO from that checkpoint with ``reward=tether.MajorityVote(extract=last_number)``: each rollout is rewarded by
   the share of its group giving the same final number, less that number's share among recent other tasks'
   rollouts (with ``--vote-contrast``, ``contrast=True``). No answer is used.
   With ``--reward label``, the labelled reward (``data.reward``) instead, for comparison. With ``--reward judge
   --judge-accuracy P``: ``reward=tether.Judge(...)`` whose judge is a scripted stand-in
   for an API model (``tether.testing.judge``): it sees the hidden answer in the task and scores each attempt
   1 if its last number is right, else 0 — for a group with probability P; otherwise it scores the group's
   attempts at random (a judge that got it wrong).
3. The held-out problems are then evaluated against their hidden answers (``data.reward``), greedy and at T=1,
   after the warm start (stage 1's last evaluation) and after GRPO.

Run: ``python examples/calc_autogen/label_free.py --steps 40`` (``train.py``'s flags, and ``--reward``,
``--judge-accuracy``; for the vote ``--vote-mode``, ``--min-share``, ``--vote-contrast``
(``contrast=True``), ``--vote-extract checked`` (``checked_number``: only calls using the problem's numbers
vote); for GRPO ``--kl-coef``, ``--grpo-temperature`` and ``--grpo-tasks fresh`` (problems the teacher never
answered)).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402
import train  # noqa: E402

import tether  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, text  # noqa: E402
from tether.testing.judge import judge_attempts  # noqa: E402


def last_number(output: Any) -> str | None:
    """The agent's answer: the last number in its final message (None: it gave none)."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", str(output))
    return f"{float(numbers[-1]):g}" if numbers else None


_NUMBER = re.compile(r"\d+(?:\.\d+)?")  # unsigned: "33-2" uses 33 and 2


def checked_number(output: Any) -> str | None:
    """The agent's answer as ``last_number`` gives it, but only when it made one calculator call and that call
    used the problem's numbers, in order (no label: the question alone says which numbers it gave). Any other
    answer is no vote (None), so a group cannot agree on numbers the problem never mentioned."""
    messages = output.get("messages") if isinstance(output, dict) else None
    if not messages:
        return None
    question = str(messages[0].get("content") or "")
    calls = [
        call
        for message in messages
        if message.get("type") == "ToolCallRequestEvent" and isinstance(message.get("content"), list)
        for call in message["content"]
    ]
    if len(calls) != 1 or not isinstance(calls[0], dict):
        return None
    try:
        expression = str(json.loads(calls[0].get("arguments") or "{}").get("expression", ""))
    except (json.JSONDecodeError, AttributeError):
        return None
    if _NUMBER.findall(expression) != _NUMBER.findall(question):
        return None
    return last_number(output.get("text", ""))


@contextlib.contextmanager
def scripted_judge(accuracy: float, seed: int) -> Iterator[FakeLLM]:
    """A judge that, for a group with probability ``accuracy``, scores right answers 1 and wrong ones 0, and
    otherwise scores the group's attempts at random (served from a thread, as an API model would be)."""
    rng = random.Random(f"judge:{seed}")

    def judge(request: dict[str, Any]) -> Reply:
        task, attempts = judge_attempts(request)
        answer = float(json.loads(task)["answer"])  # the hidden answer: the scripted judge sees it
        right = rng.random() < accuracy
        scores = []
        for name, transcript in attempts.items():
            said = last_number(transcript.rsplit("final output: ", 1)[-1])
            correct = said is not None and abs(float(said) - answer) < 1e-6
            value = float(correct) if right else round(rng.random(), 2)
            scores.append({"id": name, "score": value, "reason": "right" if correct else "wrong"})
        return text(json.dumps({"scores": scores}))

    with FakeLLM(handler=judge) as llm:
        yield llm


def _history(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _warm_start(
    args: Any, agent: Any, problems: Any, train_tasks: list[Any], test_tasks: list[Any], common: dict[str, Any]
) -> tether.FitResult:
    """Stage 1: the warm start on every demonstration, evaluated against the hidden answers."""
    student, lora = train._student(args)
    with train.scripted_teacher(problems["train"], data.demo_accuracy(args.demo_accuracy), args.seed) as teacher:
        warm_start = tether.WarmStart(
            teacher=teacher.base_url,
            rollouts=args.n_train,
            min_reward=0.0,  # every demonstration kept: no label decides
            epochs=args.sft_epochs,
            lr=args.sft_lr,
            batch_size=args.sft_batch,
            micro_batch=min(args.sft_batch, args.micro_batch),
            lora=lora,
        )
        try:  # (data.reward here only measures the held-out accuracy: nothing trains on it)
            return tether.Trainer(model=student, algorithm=warm_start, name="warm", **common).fit(
                tether.wrap(agent, reward=data.reward), train=train_tasks, val=test_tasks
            )
        finally:
            asyncio.run(student.close())


def _arm(mine: argparse.Namespace, lr: float) -> str:
    """The GRPO run's folder name under --run-dir: the reward and its settings (arms can share a warm start)."""
    kl = f"-kl{mine.kl_coef:g}" if mine.kl_coef else ""
    kl += f"-lr{lr:g}" if lr != train.DEFAULT_LR else ""
    kl += "-fresh" if mine.grpo_tasks == "fresh" else ""
    kl += f"-t{mine.grpo_temperature:g}" if mine.grpo_temperature != 1.0 else ""
    if mine.reward == "judge":
        return f"judge-{mine.judge_accuracy:g}{kl}"
    if mine.reward == "vote":
        contrast = "-contrast" if mine.vote_contrast else ""
        contrast += "-checked" if mine.vote_extract == "checked" else ""
        return f"vote-{mine.vote_mode}{contrast}" + (f"-min{mine.min_share:g}" if mine.min_share else "") + kl
    return mine.reward + kl


def main(argv: list[str] | None = None) -> int:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--reward", choices=("vote", "judge", "label"), default="vote")
    extra.add_argument("--judge-accuracy", type=float, default=1.0)
    extra.add_argument(
        "--vote-mode", choices=("share", "majority"), default="share", help="MajorityVote(mode=...)"
    )
    extra.add_argument(
        "--vote-extract",
        choices=("last_number", "checked"),
        default="last_number",
        help="MajorityVote(extract=...): the final number, or checked_number (calls using the problem's numbers)",
    )
    extra.add_argument(
        "--grpo-tasks",
        choices=("demonstrated", "fresh"),
        default="demonstrated",
        help="GRPO's tasks: the warm start's problems, or as many problems the teacher never answered",
    )
    extra.add_argument("--min-share", type=float, default=0.0, help="MajorityVote(min_share=...)")
    extra.add_argument(
        "--vote-contrast",
        action="store_true",
        help="MajorityVote(contrast=True): subtract each answer's share among other recent tasks' answers",
    )
    extra.add_argument("--kl-coef", type=float, default=0.0, help="GRPO(kl_coef=...): held near the warm start")
    extra.add_argument(
        "--grpo-temperature", type=float, default=1.0, help="GRPO(temperature=...): of the training rollouts"
    )
    extra.add_argument(
        "--reuse-warm-start", action="store_true", help="start from <run-dir>/warm/checkpoint when it exists"
    )
    mine, rest = extra.parse_known_args(argv)
    args = train.parse_settings(rest)
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from agent import agent  # the user's AutoGen agent, unchanged

    problems = data.splits(n_train=args.n_train, n_val=0, n_test=args.n_test, seed=args.seed)
    train_tasks = [p.task() for p in problems["train"]]
    test_tasks = [p.task() for p in problems["test"]]
    common: dict[str, Any] = {
        "n_runners": args.runners,
        "seed": args.seed,
        "run_root": str(run_dir),
        "sampling": {"max_tokens": args.max_tokens},
    }
    warm_dir = run_dir / "warm"
    if mine.reuse_warm_start and (warm_dir / "checkpoint").exists():  # stage 1 of an earlier run, same flags
        warm = tether.FitResult(run_dir=warm_dir, history=_history(warm_dir), checkpoint=warm_dir / "checkpoint")
    else:
        warm = _warm_start(args, agent, problems, train_tasks, test_tasks, common)
    assert warm.checkpoint is not None
    grpo = tether.GRPO(
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        lr=args.lr,
        micro_batch=args.micro_batch,
        kl_coef=mine.kl_coef,
        temperature=mine.grpo_temperature,
    )
    trainer = tether.Trainer(
        model=f"embedded:{warm.checkpoint}",
        algorithm=grpo,
        steps=args.steps,
        eval_every=args.steps,
        name=_arm(mine, args.lr),
        **common,
    )
    with contextlib.ExitStack() as stack:
        if mine.reward == "judge":
            judge_llm = stack.enter_context(scripted_judge(mine.judge_accuracy, args.seed))
            reward: Any = tether.Judge(judge_llm.base_url)
        elif mine.reward == "label":  # the comparison: the labelled reward train.py uses
            reward = data.reward
        else:
            reward = tether.MajorityVote(
                extract=checked_number if mine.vote_extract == "checked" else last_number,
                mode=mine.vote_mode,
                min_share=mine.min_share,
                contrast=mine.vote_contrast,
            )
        grpo_tasks = train_tasks
        if mine.grpo_tasks == "fresh":  # problems no demonstration answered, none in the held-out set
            seen = problems["train"] + problems["test"]
            grpo_tasks = [p.task() for p in data.fresh(args.n_train, args.seed, seen)]
        voted = trainer.fit(tether.wrap(agent, reward=reward), train=grpo_tasks, preflight=not args.no_preflight)
    assert voted.checkpoint is not None
    after: dict[str, float] = {}
    for label, temperature in (("greedy", 0.0), ("T=1", 1.0)):
        scorer = tether.Trainer(
            model=f"embedded:{voted.checkpoint}",
            n_runners=args.runners,
            seed=args.seed,
            sampling={"max_tokens": args.max_tokens, "temperature": temperature},
            progress=False,
        )
        after[label] = scorer.evaluate(tether.wrap(agent, reward=data.reward), test_tasks)["mean_reward"]
    steps = [h for h in voted.history if h.get("kind") == "train"]
    first, last = steps[0], steps[-1]
    print(f"\nheld-out problems: {len(test_tasks)}, against their hidden answers")
    for label, key in (("greedy", "greedy_accuracy"), ("T=1", "sampled_accuracy")):
        before = warm.evals[0][key]
        warmed = warm.evals[-1][key]
        print(
            f"accuracy ({label}): before {before:.0%}, after the warm start {warmed:.0%}, after {args.steps} "
            f"GRPO steps ({_arm(mine, args.lr)}) {after[label]:.0%} "
            f"({(after[label] - warmed) * 100:+.0f} points)"
        )
    if mine.reward == "judge":
        cost = voted.judge_cost
        print(
            f"judge (right on a group {mine.judge_accuracy:.0%} of the time): {cost['judge/calls']:.0f} calls, "
            f"{cost['judge/prompt_tokens']:.0f} prompt + {cost['judge/completion_tokens']:.0f} completion tokens"
        )
    elif mine.reward == "vote":
        skipped, groups = (sum(h.get(f"majority/{k}", 0) for h in steps) for k in ("skipped", "groups"))
        print(
            f"majority agreement: step 1 {first.get('majority/agreement', 0):.2f}, "
            f"step {last['step']} {last.get('majority/agreement', 0):.2f}; groups skipped (below --min-share): "
            f"{skipped:.0f} of {groups:.0f}"
        )
        if mine.vote_contrast:
            print(
                "share of recent other tasks' rollouts giving their commonest answer: step 1 "
                f"{first.get('majority/common_share', 0):.2f}, step {last['step']} "
                f"{last.get('majority/common_share', 0):.2f}"
            )
    print(f"train reward: step 1 {first['reward']:.2f}, step {last['step']} {last['reward']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
