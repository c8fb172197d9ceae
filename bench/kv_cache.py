"""CPU time of the local sampler on multi-turn conversations with the KV cache across turns on and off.

Runs ``--conversations`` concurrent three-turn conversations (a system turn with a tool list, then each turn the
model's reply and a tool result appended, as an agent sends them) against a local backend with ``kv_cache=0`` and
with the default budget, seeded at T=1, and prints the process CPU seconds of each, the cache's hit counts, and
whether the sampled tokens were the same.

    python bench/kv_cache.py [--model embedded|smollm2] [--conversations 16] [--tokens 24]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import torch

from tether.models.base import ChatRequest
from tether.models.local._backend import LocalBackend

SYSTEM = (
    "You are a careful calculator agent. Use the calc tool for every arithmetic step, then answer with the number "
    "alone. Never guess: call calc, read its result, and continue until the question is answered."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


def _backend(model: str, budget: int | None) -> LocalBackend:
    if model == "embedded":
        from tether.models.embedded.backend import EmbeddedBackend

        return EmbeddedBackend(kv_cache=budget)
    from tether.models.hf import HFBackend
    from tether.models.smollm2 import checkpoint

    return HFBackend(str(checkpoint()), device="cpu", kv_cache=budget)


async def _conversation(backend: LocalBackend, index: int, tokens: int) -> list[list[int]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"What is {index * 7} plus {index + 30}, times 3?"},
    ]
    out = []
    for turn in range(3):
        request = ChatRequest(
            messages=messages, tools=TOOLS, temperature=1.0, max_tokens=tokens, seed=index * 10 + turn
        )
        choice = (await backend.chat(request)).choices[0]
        out.append(list(choice.response_token_ids or []))
        messages += [
            {"role": "assistant", "content": backend.decode(out[-1])},
            {"role": "user", "content": f"calc returned {index * 3 + turn}"},
        ]
    return out


async def _run(model: str, budget: int | None, conversations: int, tokens: int) -> tuple[float, Any, Any]:
    backend = _backend(model, budget)
    start = time.process_time()
    calls = await asyncio.gather(*(_conversation(backend, i, tokens) for i in range(conversations)))
    spent = time.process_time() - start
    await backend.close()
    return spent, calls, backend.kv_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", choices=["embedded", "smollm2"])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(1)
    off, calls_off, _ = asyncio.run(_run(args.model, 0, args.conversations, args.tokens))
    on, calls_on, stats = asyncio.run(_run(args.model, None, args.conversations, args.tokens))
    share = stats["reused_tokens"] / max(1, stats["prompt_tokens"])
    print(f"{args.model}: {args.conversations} conversations x 3 turns, {args.tokens} tokens a reply, T=1 seeded")
    print(f"kv cache off: {off:.1f} CPU-s")
    hits = f"{stats['hits']} of {stats['calls']} calls hit, {share:.0%} of prompt tokens reused"
    print(f"kv cache on:  {on:.1f} CPU-s ({on / off:.2f}x); {hits}")
    print(f"same tokens: {calls_on == calls_off}")


if __name__ == "__main__":
    main()
