"""Model backends, chosen by ``model=`` strings. Each backend module is imported only when asked for.

- ``"embedded"`` / ``"embedded:<checkpoint dir>"`` — the small model defined in this repo (needs
  ``tether[embedded]``).
- ``"hf:<path>"`` — a local transformers checkpoint (needs ``tether[embedded]``).
- ``"http://…/v1"`` / ``"https://…/v1"`` — any OpenAI-compatible server, passed through.
- ``"vllm:<model>"`` — a vLLM OpenAI server started and stopped by tether (GPU; needs vLLM).
"""

from __future__ import annotations

from tether.models.base import BackendError, BadRequest, ChatRequest, ChatResult, Choice, ModelBackend

__all__ = ["BackendError", "BadRequest", "ChatRequest", "ChatResult", "Choice", "ModelBackend"]
