"""On-policy distillation, one package: ``tether.Distill`` and its teacher.

- ``update``: ``Distill``, GRPO's loop and update with a teacher's per-token signal (imports torch).
- ``teacher``: which teachers can score the student's tokens, loading a local one, the tokenizer check (no torch
  until a teacher is opened); ``vllm_teacher``: a ``vllm:`` teacher through ``prompt_logprobs``.

``from tether.algorithms.distill import Distill`` loads torch then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.algorithms.distill.update import Distill

__all__ = ["Distill"]


def __getattr__(name: str) -> Any:
    if name == "Distill":
        from tether.algorithms.distill.update import Distill

        return Distill
    raise AttributeError(f"module 'tether.algorithms.distill' has no attribute {name!r}")
