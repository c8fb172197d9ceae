"""The embedded model: a small causal LM defined in this repo, trained on CPU, needing no download.

- ``create_embedded(corpus, preset=, seed=)`` → ``EmbeddedModel`` (model + locally trained tokenizer);
  ``EmbeddedModel.save(dir)`` / ``EmbeddedModel.load(dir)`` use ordinary transformers checkpoint directories.
- ``template``: the compact chat format (render OpenAI messages and tools; parse replies into tool calls).
- ``sft(model, conversations, tools)``: supervised warm start on demonstration conversations.
- ``EmbeddedBackend``: the ``model="embedded"`` backend (batched sampling with token ids and logprobs).

Names load lazily, so ``tether.models.embedded.template`` works without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.models.embedded.backend import EmbeddedBackend
    from tether.models.embedded.model import PRESETS, EmbeddedModel, create_embedded
    from tether.models.embedded.supervised import sft

_LAZY = {
    "EmbeddedBackend": "tether.models.embedded.backend",
    "EmbeddedModel": "tether.models.embedded.model",
    "PRESETS": "tether.models.embedded.model",
    "create_embedded": "tether.models.embedded.model",
    "sft": "tether.models.embedded.supervised",
}

__all__ = ["PRESETS", "EmbeddedBackend", "EmbeddedModel", "create_embedded", "sft"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tether.models.embedded' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
