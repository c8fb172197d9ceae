"""The embedded model: a small Llama-style causal LM with a locally trained tokenizer, built from text.

``create_embedded(corpus)`` trains the tokenizer and initialises the model (seeded, random weights);
``EmbeddedModel.save(dir)`` writes an ordinary transformers checkpoint directory (config, safetensors,
tokenizer files with the chat template) that reloads with ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained``; ``EmbeddedModel.load(dir)`` reads it back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from tether.models._quiet import quiet
from tether.models.embedded import template
from tether.models.embedded.corpus import builtin_corpus
from tether.models.embedded.tokenizer import train_tokenizer

#: model sizes: hidden size, layers, heads, MLP width, BPE vocabulary bound, context length
PRESETS: dict[str, dict[str, int]] = {
    "nano": {"hidden": 64, "layers": 2, "heads": 2, "mlp": 192, "vocab": 512, "context": 1024},  # tests
    "tiny": {"hidden": 128, "layers": 4, "heads": 4, "mlp": 384, "vocab": 768, "context": 2048},  # ~1M
    "small": {"hidden": 256, "layers": 6, "heads": 8, "mlp": 768, "vocab": 2048, "context": 2048},  # ~5M
}


@dataclass
class EmbeddedModel:
    """A model, its tokenizer and its chat template (``tether.models.embedded.template``)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def template(self) -> Any:
        return template

    @property
    def stop_token_ids(self) -> list[int]:
        return turn_token_ids(self.tokenizer)

    @property
    def context_length(self) -> int:
        return int(self.model.config.max_position_embeddings)

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write a transformers checkpoint directory (created if missing); returns its path."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with quiet():
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, device: str = "cpu") -> EmbeddedModel:
        """Load a checkpoint written by ``save`` (or any checkpoint with the embedded chat markers)."""
        path = Path(directory)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} is not a checkpoint directory (no config.json): pass a directory written by "
                "EmbeddedModel.save, or use model='embedded' to build a fresh model"
            )
        tokenizer = AutoTokenizer.from_pretrained(path)
        missing = [
            m for m in template.MARKERS if tokenizer.convert_tokens_to_ids(m) in (None, tokenizer.unk_token_id)
        ]
        if missing:
            raise ValueError(
                f"{path} has no embedded chat markers ({', '.join(missing)}): it is not an embedded checkpoint; "
                f"serve it with model='hf:{path}'"
            )
        with quiet():
            model = _to(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), device)
        return cls(model=model, tokenizer=tokenizer)


def token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    value: Any = tokenizer.convert_tokens_to_ids(token)
    return int(value)


def turn_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    return [token_id(tokenizer, t) for t in template.TURN_TOKENS]


def _to(model: Any, device: str) -> PreTrainedModel:
    """The model on ``device``, in eval mode."""
    moved: PreTrainedModel = model.to(device)
    moved.eval()
    return moved


def create_embedded(
    corpus: Iterable[str] = (), *, preset: str = "tiny", seed: int = 0, device: str = "cpu"
) -> EmbeddedModel:
    """A fresh model: tokenizer trained on ``corpus`` plus the built-in corpus, weights randomly initialised
    from ``seed`` (the global torch RNG is left as it was)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: choose one of {', '.join(PRESETS)}")
    size = PRESETS[preset]
    tokenizer = train_tokenizer([*corpus, *builtin_corpus()], vocab_size=size["vocab"])
    tokenizer.model_max_length = size["context"]
    stops = turn_token_ids(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size["hidden"],
        intermediate_size=size["mlp"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["heads"],
        max_position_embeddings=size["context"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=stops,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = stops
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return EmbeddedModel(model=_to(model, device), tokenizer=tokenizer)
