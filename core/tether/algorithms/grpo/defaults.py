"""GRPO's defaults that depend on the model: the learning rate by what is trained, and the KL reference.

**Learning rate** (``GRPO(lr=None)``, the default): picked from the parameters the optimizer gets.

=====================================  ========  =====================================================
what trains                            lr        why
=====================================  ========  =====================================================
LoRA adapters, base under 1B params    5e-4      SmolLM2-135M learned at 5e-4 (examples/lora_smollm2)
LoRA adapters, base of 1B or more      2e-4      LoRA's best rate sits ~10x full fine-tuning's
all weights, under 50M params          5e-4      the embedded model (0.9-25M, warm-started): its examples
all weights, 50M to 1B                 1e-5      a pretrained small model: larger steps undo pretraining
all weights, 1B or more                1e-6      the rate RL recipes use on 1.5B-7B models (verl, TRL)
=====================================  ========  =====================================================

**KL reference** (``kl_coef > 0``): the policy the penalty holds the model near. With LoRA it is the base
itself, the adapters switched off for the reference pass (``peft``'s ``disable_adapter``), so no second copy
of the model is held; with full weights, a frozen copy of the model as the first update found it.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch

#: (largest parameter count, lr) for full-weight training, first match wins
FULL_LR = ((50_000_000, 5e-4), (1_000_000_000, 1e-5), (None, 1e-6))
#: (largest base parameter count, lr) for LoRA adapters
LORA_LR = ((1_000_000_000, 5e-4), (None, 2e-4))


def is_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries PEFT LoRA adapters (only they train)."""
    return bool(getattr(model, "peft_config", None)) and hasattr(model, "disable_adapter")


def default_lr(model: torch.nn.Module) -> float:
    """The learning rate for ``model`` by what trains (see the module docstring)."""
    base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    for limit, lr in LORA_LR if is_lora(model) else FULL_LR:
        if limit is None or base < limit:
            return lr
    raise AssertionError("unreachable: the last row has no limit")


class Reference:
    """The KL reference of the models one GRPO updates: the LoRA base, or a frozen copy of full weights."""

    def __init__(self) -> None:
        self._copy: torch.nn.Module | None = None

    def prepare(self, model: torch.nn.Module) -> None:
        """Before an update with a KL penalty: copy full weights the first time; nothing for LoRA."""
        if self._copy is None and not is_lora(model):
            self._copy = copy.deepcopy(model).eval().requires_grad_(False)

    @property
    def holds_copy(self) -> bool:
        return self._copy is not None

    @contextlib.contextmanager
    def model(self, model: torch.nn.Module) -> Iterator[Any]:
        """The reference model to run under ``torch.no_grad()``: ``model`` with adapters off, or the copy."""
        if self._copy is not None and not is_lora(model):
            yield self._copy
            return
        with model.disable_adapter():  # type: ignore[operator]
            yield model
