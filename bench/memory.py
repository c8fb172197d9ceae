"""Resident memory per GRPO step: does training's RSS stay flat?

Run: ``python bench/memory.py [--steps 10] [--rows 16] [--micro-batch 8] [--max-tokens 48] [--model DIR]
[--kinds embedded hf-full hf-lora]`` (needs ``tether[lora,openai]``; ``hf-*`` use SmolLM2-135M-Instruct from
``model="smollm2"``'s cache, see ``tether.models.smollm2``, or ``--model <checkpoint dir>``).

Each kind trains in its own process through ``Trainer.fit`` as a user runs it (a plain OpenAI-client agent
through the proxy, ``--rows`` rollouts a step in groups of 4, micro-batches of ``--micro-batch`` rows, on
CPU): ``embedded`` (the embedded model, full weights), ``hf-full`` (the checkpoint, full weights),
``hf-lora`` (the checkpoint with ``tether.LoRA()`` and ``kl_coef=0.01``, so the KL reference is in play).
The loop records the process's RSS after every step (``rss_mb`` in ``metrics.jsonl``); printed here per step
with the growth from step 2 to the last (step 1 allocates the optimizer state).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

KINDS = ("embedded", "hf-full", "hf-lora")


def _agent() -> Any:
    import openai

    import tether

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)

    def add(task: str) -> str:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
        return reply.choices[0].message.content or ""

    def reward(task: str, output: str) -> float:
        a, b = (int(x) for x in task.removeprefix("What is ").removesuffix("? Answer with the number.").split("+"))
        return float(str(a + b) in output)

    return tether.wrap(add, reward=reward)


def _run(kind: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import tether

    model = "embedded" if kind == "embedded" else f"hf:{args.model}"
    lora = tether.LoRA() if kind == "hf-lora" else None
    tasks = [f"What is {a}+{b}? Answer with the number." for a in range(10) for b in range(10)]
    with tempfile.TemporaryDirectory() as root:
        trainer = tether.Trainer(
            model=model,
            algorithm=tether.GRPO(
                group_size=4,
                tasks_per_step=max(args.rows // 4, 1),
                micro_batch=args.micro_batch,
                lora=lora,
                kl_coef=0.01 if lora is not None else 0.0,
            ),
            n_runners=args.rows,
            steps=args.steps,
            eval_every=args.steps,
            name=kind,
            run_root=root,
            progress=False,
            sampling={"max_tokens": args.max_tokens},
        )
        result = trainer.fit(_agent(), train=tasks)
    return [h for h in result.history if h["kind"] == "train"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rows", type=int, default=16, help="rollouts a step (groups of 4)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--model", help="checkpoint dir for hf-* (default: model='smollm2''s cache)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_run(args.one, args)))
        return
    if args.model is None and any(k != "embedded" for k in args.kinds):
        from tether.models import smollm2

        args.model = str(smollm2.checkpoint())
    print(f"rows {args.rows}, micro-batch {args.micro_batch}, max tokens {args.max_tokens}, model {args.model}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for kind in args.kinds:
        argv = [sys.executable, __file__, "--one", kind, *sys.argv[1:]]
        if args.model:
            argv += ["--model", args.model]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        history = json.loads(out.strip().splitlines()[-1])
        rss = [h.get("rss_mb", float("nan")) for h in history]
        steps = " ".join(f"{r:.0f}" for r in rss)
        growth = rss[-1] - rss[1] if len(rss) > 2 else float("nan")
        print(f"{kind:9s} RSS MB per step: {steps}   growth step 2 -> {len(rss)}: {growth:+.0f} MB")


if __name__ == "__main__":
    main()
