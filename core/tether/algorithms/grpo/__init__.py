"""GRPO, one package: the update, the loop every weight-training step runs, and their parts.

- ``update``: ``GRPO``, the clipped policy-gradient update on credited transitions (imports torch).
- ``loop``: the training loop (steps, evaluation, checkpoints, resume) and its base class ``PolicyUpdate`` and
  ``LoopHooks``, through which a joint run adds its prompt search (no torch).
- ``policies``: one update per policy of ``wrap(optimize={policy: [...]})``; ``defaults``: the learning rate by
  what trains and the KL reference; ``drift``: the trainer-vs-sampler logprob figures.

``from tether.algorithms.grpo import GRPO`` loads torch then; the loop and its hooks load without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.algorithms.grpo.loop import LoopHooks, PolicyUpdate

if TYPE_CHECKING:
    from tether.algorithms.grpo.update import GRPO

__all__ = ["GRPO", "LoopHooks", "PolicyUpdate"]


def __getattr__(name: str) -> Any:
    if name == "GRPO":
        from tether.algorithms.grpo.update import GRPO

        return GRPO
    raise AttributeError(f"module 'tether.algorithms.grpo' has no attribute {name!r}")
