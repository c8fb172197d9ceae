"""Where a torch model tether holds runs, and in what precision: CUDA and bf16 when there is a GPU, CPU and
float32 otherwise; both overridable (``device="cpu"``, ``dtype="float16"``)."""

from __future__ import annotations

import torch

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def pick_device(device: str | None = None) -> str:
    """``device`` if given (``"cpu"``, ``"cuda"``, ``"cuda:1"``), else ``"cuda"`` when a GPU is visible."""
    if device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but torch sees no CUDA GPU here: use device='cpu'")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str, dtype: str | torch.dtype | None = None) -> torch.dtype:
    """``dtype`` if given, else bf16 on a GPU that supports it (fp16 on one that does not), float32 on CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype:
        try:
            return _DTYPES[dtype.lower()]
        except KeyError:
            raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(sorted(_DTYPES))}") from None
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32
