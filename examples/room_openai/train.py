"""Train the plain-OpenAI room-booking agent: GRPO on the embedded model (CPU), or APO on its system prompt.

GRPO (default):
1. Warm start: build the embedded model and fine-tune it on imperfect demonstrations in the agent's own
   prompt format (``find_rooms`` then ``book_room``; the right floor and seats, the equipment often confused).
   Long enough (1200 small batches) that the model copies floor, seats and the first listed room reliably:
   with copying noisy, reward is mostly noise and GRPO has nothing to learn from. Cached in the run folder.
2. GRPO with ``tether.Trainer.fit``, evaluating on held-out requests before, during and after. A moderate
   learning rate over 16 tasks a step: larger, noisier steps undo the copying while fixing the equipment.

APO (``--apo``): the agent's system prompt template (``room_system`` in tether's resources) is rewritten by an
optimizer model and scored on validation requests; needs OpenAI-compatible endpoints for the agent's model and
the optimizer (``--agent-model``, ``--optimizer-model``, e.g. a local vLLM or an API with $OPENAI_API_KEY).

In both modes the agent function is unchanged: ``run=`` hands it the prompt from the rollout's resources.

Run: ``python examples/room_openai/train.py`` (``--help`` lists the knobs).
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

PROMPT_NAME = "room_system"


def prompt_runner(default: str) -> Callable[[Any, Any, tether.Resources], Any]:
    """``run=`` for ``tether.wrap``: format the ``room_system`` template of the rollout's resources (or
    ``default`` when there is none) for the task's office and hand it to the agent function."""

    def run(agent_fn: Any, task: dict[str, Any], resources: tether.Resources) -> Any:
        template = resources.prompts.get(PROMPT_NAME) or tether.PromptTemplate(default)
        return agent_fn(task, system_prompt=template.format(office=task["office"]))

    return run


def demonstrations(
    agent_module: Any, requests: list[data.Request], p_correct: float, seed: int
) -> tuple[list[dict[str, Any]], float]:
    """Two-call conversations in the agent's own format, and how often they book the right room."""
    rng = random.Random(seed)
    conversations, correct = [], 0
    for i, request in enumerate(requests):
        task = request.task()
        arguments = data.demonstration_call(request, rng, p_correct)
        found = agent_module.find_rooms(task["office"], **arguments)
        room = json.loads(found)[0]["room"]
        correct += room == task["room"]
        messages = agent_module.messages_for(task)
        messages += [
            _call(f"call_{i}_0", "find_rooms", arguments),
            {"role": "tool", "tool_call_id": f"call_{i}_0", "content": found},
            _call(f"call_{i}_1", "book_room", {"room": room}),
        ]
        conversations.append({"messages": messages, "tools": agent_module.TOOLS})
    return conversations, correct / len(requests)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments, separators=(",", ":"))}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def warm_start(
    agent_module: Any, run_dir: Path, requests: list[data.Request], args: argparse.Namespace
) -> tuple[Path, float]:
    """The warm-started checkpoint (built once, then reused) and the demonstrations' accuracy."""
    from tether.models.embedded import create_embedded, sft

    checkpoint = run_dir / "warmstart"
    info_path = checkpoint / "warmstart.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        print(f"warm start: reusing {checkpoint} (demonstrations {info['demo_accuracy']:.0%} right)")
        return checkpoint, float(info["demo_accuracy"])
    demos, demo_accuracy = demonstrations(agent_module, requests, args.demo_accuracy, args.seed)
    corpus = [json.dumps(d["messages"]) for d in demos[:200]] + [json.dumps(agent_module.TOOLS)]
    model = create_embedded(corpus, preset=args.preset, seed=args.seed)
    print(
        f"warm start: {model.num_params / 1e6:.2f}M-parameter model, {len(demos)} demonstrations "
        f"({demo_accuracy:.0%} book the right room)"
    )
    started = time.perf_counter()
    sft(
        model,
        demos,
        epochs=args.sft_epochs,
        lr=args.sft_lr,
        batch_size=args.sft_batch_size,
        seed=args.seed,
        progress=True,
    )
    model.save(checkpoint)
    info_path.write_text(json.dumps({"demo_accuracy": demo_accuracy, "seconds": time.perf_counter() - started}))
    return checkpoint, demo_accuracy


def train_grpo(agent_module: Any, problems: dict[str, list[data.Request]], args: argparse.Namespace) -> None:
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, demo_accuracy = warm_start(agent_module, run_dir, problems["train"], args)
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
    wrapped = tether.wrap(
        agent_module.book_meeting, reward=data.reward, run=prompt_runner(agent_module.SYSTEM_PROMPT)
    )
    result = trainer.fit(
        wrapped,
        train=[r.task() for r in problems["train"]],
        val=[r.task() for r in problems["test"]],
        resume=args.resume,
    )
    if not result.evals:
        print(result.summary())  # says no evaluation was recorded
        return
    print(f"\nheld-out requests: {len(problems['test'])} (never trained on)")
    print(f"demonstrations used for the warm start: {demo_accuracy:.0%} right")
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
