"""CPU time of the local sampler in float32 and in bfloat16, for the embedded model and SmolLM2-135M.

Samples the same batches of seeded rows (T=1, like GRPO's rollouts) and of unseeded rows (no draw decided
alone: the matmuls alone) with the model in each dtype, one torch thread, and prints CPU seconds per 1,000
sampled tokens (best of ``--repeat``). What ``tether.models._device.pick_dtype`` chooses on a CPU follows these
figures (docs/models.md).

    python bench/sampler_dtype.py [--models embedded,smollm2] [--rows 16] [--tokens 48] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import random
import time

import torch

from tether.models.local._sampling import SampleParams, generate


def _models(names: list[str]) -> list[tuple[str, object, object, list[int]]]:
    out = []
    for name in names:
        if name == "embedded":
            from tether.models.embedded.backend import EmbeddedBackend

            backend = EmbeddedBackend()
        else:
            from tether.models.hf import HFBackend
            from tether.models.smollm2 import checkpoint

            backend = HFBackend(str(checkpoint()), device="cpu", dtype="float32")
        messages = [
            {"role": "system", "content": "You are a calculator agent. Use the add tool to add numbers."},
            {"role": "user", "content": "What is 12 plus 30, then doubled?"},
        ]
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two numbers",
                    "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
                },
            }
        ]
        out.append((name, backend.model, backend, backend.render(messages, tools)))
    return out


def _cpu_per_1k(model: object, backend: object, prompt: list[int], rows: int, tokens: int, seeded: bool) -> float:
    rng = random.Random(0)
    params = [
        SampleParams(tokens, temperature=1.0, seed=rng.getrandbits(40) if seeded else None) for _ in range(rows)
    ]
    start = time.process_time()
    with torch.inference_mode():
        samples = generate(
            model,  # type: ignore[arg-type]
            backend.tokenizer,  # type: ignore[attr-defined]
            [prompt] * rows,
            params,
            stop_token_ids=backend.stop_token_ids,  # type: ignore[attr-defined]
        )
    spent = time.process_time() - start
    return 1000 * spent / max(1, sum(len(s.token_ids) for s in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="embedded,smollm2")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.rows} rows x {args.tokens} tokens, T=1")
    print("model      dtype     seeded s/1k tok   unseeded s/1k tok")
    for name, model, backend, prompt in _models(args.models.split(",")):
        for dtype in (torch.float32, torch.bfloat16):
            m = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
            seeded = min(_cpu_per_1k(m, backend, prompt, args.rows, args.tokens, True) for _ in range(args.repeat))
            plain = min(_cpu_per_1k(m, backend, prompt, args.rows, args.tokens, False) for _ in range(args.repeat))
            print(f"{name:<10} {str(dtype).split('.')[-1]:<9} {seeded:>16.2f} {plain:>19.2f}")


if __name__ == "__main__":
    main()
