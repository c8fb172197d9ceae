"""A tiny real checkpoint that vLLM serves on a CPU, built here from the embedded model's code (nothing is
downloaded): the tests of the ``vllm`` tox env and ``bench/vllm_lora.py`` use it.

It is the embedded model (tokenizer trained on the task text, its chat template and stop markers) with two
64-dimensional attention heads, since vLLM's CPU attention rejects the embedded presets' smaller heads, and
it is warm-started to answer "Pick a letter, round N." with one letter of ``LETTERS`` uniformly: about a
quarter of its answers are in ``GOOD``, the toy task GRPO learns. torch is imported on call.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

LETTERS = "abcdefgh"
GOOD = frozenset("ab")


def letter_tasks(n: int, offset: int = 0) -> list[str]:
    """``n`` prompts of the toy task, numbered from ``offset`` (distinct offsets: distinct prompts)."""
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


def letter_reward(task: str, output: str) -> float:
    """1 when the answer is a good letter, else 0."""
    return float(output.strip() in GOOD)


def letter_checkpoint(directory: str | Path, *, seed: int = 0) -> Path:
    """Write the checkpoint (config, weights, tokenizer with its chat template) to ``directory``."""
    import torch
    from transformers import LlamaForCausalLM

    from tether.models.embedded import create_embedded, sft

    rng = random.Random(seed)
    demos = [
        [{"role": "user", "content": task}, {"role": "assistant", "content": rng.choice(LETTERS)}]
        for task in letter_tasks(400)
    ]
    model = create_embedded([d[0]["content"] for d in demos] + list(LETTERS), preset="nano", seed=seed)
    config: Any = model.model.config
    config.hidden_size, config.intermediate_size = 128, 256
    config.num_attention_heads = config.num_key_value_heads = 2
    config.head_dim = 64
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.model = LlamaForCausalLM(config).eval()
    sft(model, demos, epochs=3, lr=3e-3, batch_size=32, seed=seed, progress=False)
    return model.save(directory)
