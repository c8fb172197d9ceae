"""Train the plain-OpenAI room-booking agent: GRPO on the embedded model (CPU), or APO on its system prompt.

GRPO (default):
1. Warm start (``tether.WarmStart``): the agent runs against a scripted teacher standing in for your API model
   (``find_rooms`` then ``book_room``; the right floor and seats, the equipment often confused), and the fresh
   embedded model is fine-tuned on those rollouts' calls. Long enough (1200 small batches) that the model copies
   floor, seats and the first listed room reliably: with copying noisy, reward is mostly noise and GRPO has
   nothing to learn from.
2. GRPO in the same run (``Trainer(algorithm=[WarmStart, GRPO])``), evaluating on held-out requests before the
   warm start, after it, during and after training. A moderate learning rate over 16 tasks a step: larger,
   noisier steps undo the copying while fixing the equipment.

APO (``--apo``): the agent's system prompt template (``room_system`` in tether's resources) is rewritten by an
optimizer model and scored on validation requests; needs OpenAI-compatible endpoints for the agent's model and
the optimizer (``--agent-model``, ``--optimizer-model``, e.g. a local vLLM or an API with $OPENAI_API_KEY).

In both modes the agent function is unchanged: ``run=`` hands it the prompt from the rollout's resources.

Run: ``python examples/room_openai/train.py`` (``--help`` lists the knobs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402

PROMPT_NAME = "room_system"


def prompt_runner(default: str) -> Callable[[Any, Any, tether.Resources], Any]:
    """``run=`` for ``tether.wrap``: format the ``room_system`` template of the rollout's resources (or
    ``default`` when there is none) for the task's office and hand it to the agent function."""

    def run(agent_fn: Any, task: dict[str, Any], resources: tether.Resources) -> Any:
        template = resources.prompts.get(PROMPT_NAME) or tether.PromptTemplate(default)
        return agent_fn(task, system_prompt=template.format(office=task["office"]))

    return run


def scripted_teacher(agent_module: Any, requests: list[data.Request], p_correct: float, seed: int) -> Any:
    """An OpenAI-compatible server standing in for the user's API model (``tether.testing.fake_llm``): it calls
    ``find_rooms`` with the request's floor and seats and, ``p_correct`` of the time, the right equipment (the
    same choice for a request every time), then books the first room listed."""
    from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call

    by_ask = {tuple(m["content"] for m in agent_module.messages_for(r.task())): r for r in requests}

    def answer(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        if messages and messages[-1].get("role") == "tool":
            found = json.loads(str(messages[-1]["content"]) or "[]")
            return tool_call("book_room", {"room": found[0]["room"]}) if found else text("No room fits.")
        asked = tuple(str(m.get("content")) for m in messages[:2])
        known = by_ask.get(asked)
        if known is None:
            return text("I cannot book that.")
        rng = random.Random(f"{seed}:{asked}")
        return tool_call("find_rooms", data.demonstration_call(known, rng, p_correct))

    return FakeLLM(handler=answer)


def train_grpo(agent_module: Any, problems: dict[str, list[data.Request]], args: argparse.Namespace) -> None:
    from tether.models.embedded import EmbeddedBackend

    student = EmbeddedBackend(preset=args.preset, seed=args.seed)  # fresh: WarmStart fits its tokenizer
    with scripted_teacher(agent_module, problems["train"], args.demo_accuracy, args.seed) as teacher:
        warm_start = tether.WarmStart(
            teacher=teacher.base_url,
            rollouts=len(problems["train"]),
            min_reward=0.0,  # every finished demonstration, right or wrong: the teacher is imperfect
            epochs=args.sft_epochs,
            lr=args.sft_lr,
            batch_size=args.sft_batch_size,
        )
        trainer = tether.Trainer(
            model=student,
            algorithm=[
                warm_start,
                tether.GRPO(group_size=args.group_size, tasks_per_step=args.tasks_per_step, lr=args.lr),
            ],
            n_runners=args.runners,
            steps=args.steps,
            eval_every=args.eval_every,
            seed=args.seed,
            name="run",
            run_root=str(args.run_dir),
            sampling={"max_tokens": 48},
        )
        wrapped = tether.wrap(
            agent_module.book_meeting, reward=data.reward, run=prompt_runner(agent_module.SYSTEM_PROMPT)
        )
        try:
            result = trainer.fit(
                wrapped,
                train=[r.task() for r in problems["train"]],
                val=[r.task() for r in problems["test"]],
                resume=args.resume,
                preflight=not args.no_preflight,
            )
        finally:
            asyncio.run(student.close())
    if not result.evals:
        print(result.summary())  # says no evaluation was recorded
        return
    print(f"\nheld-out requests: {len(problems['test'])} (never trained on)")
    teacher_record = next((h for h in result.history if h.get("kind") == "warmstart"), None)
    if teacher_record is not None:
        print(f"demonstrations used for the warm start: {teacher_record['teacher_reward']:.0%} right")
    warm = [h for h in result.evals if h.get("stage") == "warmstart"]
    if warm:
        print(f"after the warm start alone: right room booked {warm[-1]['greedy_accuracy']:.0%} greedy")
    rows = {"greedy_accuracy": "right room booked (greedy)", "sampled_accuracy": "right room booked (T=1)"}
    print(result.summary(rows))


def train_apo(agent_module: Any, problems: dict[str, list[data.Request]], args: argparse.Namespace) -> None:
    if not args.agent_model or not args.optimizer_model:
        raise SystemExit("--apo needs --agent-model and --optimizer-model (OpenAI-compatible URLs ending in /v1)")
    start = agent_module.SYSTEM_PROMPT
    apo = tether.APO(
        optimizer_model=args.optimizer_model,
        optimizer_model_name=args.optimizer_model_name,
        prompts={PROMPT_NAME: tether.PromptTemplate(start)},
        beam_width=args.beam_width,
        branch_factor=args.branch_factor,
        rounds=args.rounds,
        train_batch_size=args.train_batch_size,
        val_batch_size=args.val_batch_size,
        seed=args.seed,
    )
    trainer = tether.Trainer(
        model=args.agent_model, algorithm=apo, n_runners=args.runners, name="apo", run_root=args.run_dir
    )
    wrapped = tether.wrap(agent_module.book_meeting, reward=data.reward, run=prompt_runner(start))
    result = trainer.fit(
        wrapped, train=[r.task() for r in problems["train"]], val=[r.task() for r in problems["val"]]
    )
    if result.interrupted:
        print(result.summary())  # APO keeps no checkpoint: the history so far is in the run folder
        return
    best = result.best_prompts[PROMPT_NAME].template
    test = [r.task() for r in problems["test"]]
    before = trainer.evaluate(wrapped, test)["mean_reward"]
    tuned = tether.wrap(agent_module.book_meeting, reward=data.reward, run=prompt_runner(best))
    after = trainer.evaluate(tuned, test)["mean_reward"]
    print(f"\nbest prompt ({result.best_score:.0%} on validation):\n{best}\n")
    gain = (after - before) * 100
    print(f"held-out requests: {len(test)}; right room booked: {before:.0%} -> {after:.0%} ({gain:+.0f}p)")
    print(f"history: {result.run_dir / 'apo_history.jsonl'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--run-dir", default="runs/room", help="where the warm start, checkpoints and metrics go")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--runners", type=int, default=16, help="rollouts run concurrently")
    parser.add_argument("--n-train", type=int, default=1600, help="training requests (demonstrations, GRPO)")
    parser.add_argument("--n-val", type=int, default=32, help="validation requests (APO scores prompts on them)")
    parser.add_argument("--n-test", type=int, default=100, help="held-out requests for the before/after numbers")
    grpo = parser.add_argument_group("GRPO on the embedded model")
    grpo.add_argument("--steps", type=int, default=40, help="GRPO steps")
    grpo.add_argument("--eval-every", type=int, default=20, help="evaluate on the held-out tasks every N steps")
    grpo.add_argument("--tasks-per-step", type=int, default=16, help="tasks per GRPO step")
    grpo.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    grpo.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate")
    grpo.add_argument("--demo-accuracy", type=float, default=0.4, help="how often demonstrations are right")
    grpo.add_argument("--sft-epochs", type=int, default=12, help="epochs of the warm-start fine-tuning")
    grpo.add_argument("--sft-batch-size", type=int, default=16, help="batch size of the warm start")
    grpo.add_argument("--sft-lr", type=float, default=3e-3, help="learning rate of the warm start")
    grpo.add_argument("--preset", default="tiny", help="size preset of the embedded model")
    grpo.add_argument(
        "--resume", action="store_true", help="continue the run in its folder (e.g. to a larger --steps)"
    )
    grpo.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip fit's preflight (it stops a run whose first rollouts would train nothing, e.g. all wrong)",
    )
    apo = parser.add_argument_group("APO on the system prompt")
    apo.add_argument("--apo", action="store_true", help="optimize the system prompt instead of the weights")
    apo.add_argument("--agent-model", help="the agent's model: an OpenAI-compatible URL")
    apo.add_argument("--optimizer-model", help="the optimizer: an OpenAI-compatible URL")
    apo.add_argument(
        "--optimizer-model-name",
        default=None,
        help="the optimizer's model name at --optimizer-model (default: the server's)",
    )
    apo.add_argument("--rounds", type=int, default=3, help="APO rounds")
    apo.add_argument("--beam-width", type=int, default=2, help="prompts kept after each round")
    apo.add_argument("--branch-factor", type=int, default=2, help="new candidates written from each kept prompt")
    apo.add_argument(
        "--train-batch-size", type=int, default=8, help="tasks a candidate is tried on when it is criticised"
    )
    apo.add_argument("--val-batch-size", type=int, default=32, help="tasks a candidate is scored on")
    args = parser.parse_args(argv)

    import agent  # the user's plain-OpenAI agent, unchanged

    problems = data.splits(n_train=args.n_train, n_val=args.n_val, n_test=args.n_test, seed=args.seed)
    if args.apo:
        train_apo(agent, problems, args)
    else:
        train_grpo(agent, problems, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
