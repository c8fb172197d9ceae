"""The precision the local sampler computes in, apart from the weights that train.

On CUDA the model runs in bf16 as a whole, as before (``tether.models._device.pick_dtype``). On a CPU the weights
stay float32 (the update's master weights) and, when sampling in bfloat16 pays, the sampler runs a bf16 copy of
them, refreshed after each update (``SamplingCopies``); ``dtype=`` on the backend (``"smollm2?dtype=bf16"``,
``EmbeddedBackend(dtype="bf16")``) chooses instead. The choice is printed once per process and model.

The automatic rule, from ``bench/sampler_dtype.py`` on this project's AMD EPYC with ``avx512_bf16`` and no AMX
(2026-11-28, docs/benchmarks.md): bf16 was slower for seeded rows, GRPO's rollouts, on both the embedded model
(3.16 vs 0.28 CPU-s per 1,000 tokens) and SmolLM2-135M (54 vs 13): a bf16 pass moves a row's numbers by a whole
bf16 unit with the batch, so many more draws land within the sampler's edge margin and are decided by a pass of
the row alone (``tether.models.local._sampling``); unseeded bf16 was 17 % faster on SmolLM2 and 75 % slower on the
embedded model. So a CPU samples in bf16 on its own only with AMX tiles (``amx_bf16``, several times avx512's
bf16 rate; not measured here) and a model of at least ``AMX_MIN_PARAMS``.
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import torch

from tether.models._device import pick_dtype

#: the smallest model an AMX CPU samples in bf16 on its own (tiny models lose to the conversions)
AMX_MIN_PARAMS = 100_000_000
_said: set[tuple[str, str]] = set()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def cpu_sample_dtype(num_params: int, dtype: str | torch.dtype | None) -> tuple[torch.dtype, str]:
    """The dtype a CPU model samples in, and why: ``dtype`` when given, else the automatic rule (module
    docstring)."""
    if dtype is not None:
        return pick_dtype("cpu", dtype), "dtype= chose it"
    flags = cpu_flags()
    if "amx_bf16" in flags and num_params >= AMX_MIN_PARAMS:
        return torch.bfloat16, "the CPU has AMX bf16 tiles"
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return (
            torch.float32,
            "bf16 sampled slower here for this size (bench/sampler_dtype.py); dtype=bf16 overrides",
        )
    return torch.float32, "the CPU has no bf16 instructions"


def say_once(model: str, dtype: torch.dtype, why: str) -> None:
    """Print the sampling dtype's choice once per process and model (on stderr)."""
    name = str(dtype).removeprefix("torch.")
    if (model, name) in _said:
        return
    _said.add((model, name))
    print(f"tether: {model} samples in {name} on the CPU ({why})", file=sys.stderr)


class SamplingCopies:
    """A copy of each served model in the sampling dtype, refreshed when its weights version moved: its trainable
    parameters copied over (the frozen ones, a LoRA base's, never change), or the whole copy made again for
    another model object (adapters attached since, a checkpoint loaded into a new model)."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._copies: dict[str, tuple[int, int, Any]] = {}

    def get(self, model: Any, key: str, version: int) -> Any:
        """``model`` itself when it computes in the sampling dtype, else its copy at ``version``."""
        if next(model.parameters()).dtype == self.dtype:
            return model
        held = self._copies.get(key)
        if held is not None and held[:2] == (version, id(model)):
            return held[2]
        with torch.inference_mode(False), torch.no_grad():  # real parameters, not inference tensors
            if held is None or held[1] != id(model):
                twin = copy.deepcopy(model).to(self.dtype)
                twin.eval()
            else:
                twin = held[2]
                mine = dict(twin.named_parameters())
                for name, param in model.named_parameters():
                    if param.requires_grad:
                        mine[name].copy_(param)
        self._copies[key] = (version, id(model), twin)
        return twin

    def clear(self) -> None:
        self._copies.clear()
