"""Sampling in bf16 on a CPU from a copy of the float32 weights that train (``tether.models.local._sample_dtype``):
chosen by ``dtype=`` or the automatic rule, said once, and refreshed after every update."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tether.models.base import ChatRequest  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.models.local._sample_dtype import cpu_flags, cpu_sample_dtype  # noqa: E402


def _greedy(backend: EmbeddedBackend) -> list[int]:
    request = ChatRequest(messages=[{"role": "user", "content": "What is 12+7?"}], temperature=0.0, max_tokens=6)
    result = asyncio.run(backend.chat(request))
    asyncio.run(backend.close())
    return list(result.choices[0].response_token_ids or [])


def test_a_bf16_sampler_samples_a_copy_of_the_float32_weights_refreshed_after_each_update(
    nano_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = EmbeddedBackend(str(nano_dir), dtype="bf16")
    assert "embedded samples in bfloat16 on the CPU (dtype= chose it)" in capsys.readouterr().err
    EmbeddedBackend(str(nano_dir), dtype="bf16")
    assert capsys.readouterr().err == ""  # said once per process
    assert backend.sample_dtype is torch.bfloat16 and next(backend.model.parameters()).dtype is torch.float32
    assert len(_greedy(backend)) > 0
    with backend.policy() as model:  # an update on the float32 master weights
        with torch.no_grad():
            model.lm_head.weight.mul_(0.5)
    _greedy(backend)
    copies = backend.sampling_copies
    assert copies is not None
    version, _, twin = copies._copies["policy"]
    assert version == backend.weights_version
    assert next(twin.parameters()).dtype is torch.bfloat16
    assert torch.equal(twin.lm_head.weight, backend.model.lm_head.weight.to(torch.bfloat16))


def test_the_automatic_choice_follows_the_measured_rule() -> None:
    dtype, _ = cpu_sample_dtype(1_000_000, None)
    assert dtype is torch.float32  # a tiny model: bf16 loses on every CPU
    big, _ = cpu_sample_dtype(135_000_000, None)
    assert big is (torch.bfloat16 if "amx_bf16" in cpu_flags() else torch.float32)
    assert cpu_sample_dtype(1, "bf16") == (torch.bfloat16, "dtype= chose it")
