"""Checkpoints are ordinary transformers directories: they reload with the Auto classes, identically."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tether.models.embedded import PRESETS, EmbeddedModel, create_embedded, template


def test_save_reloads_with_auto_classes_and_identical_logits(nano: EmbeddedModel, nano_dir: Path) -> None:
    assert (nano_dir / "model.safetensors").is_file() and (nano_dir / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(nano_dir)
    tok = AutoTokenizer.from_pretrained(nano_dir)
    ids = tok.encode(template.render([{"role": "user", "content": "What is 2+2?"}]), return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(ids).logits, nano.model(ids).logits)
    again = EmbeddedModel.load(nano_dir)
    with torch.no_grad():
        assert torch.equal(again.model(ids).logits, nano.model(ids).logits)
    assert again.stop_token_ids == nano.stop_token_ids


def test_same_seed_same_weights_and_presets() -> None:
    a = create_embedded(["abc"], preset="nano", seed=3)
    b = create_embedded(["abc"], preset="nano", seed=3)
    c = create_embedded(["abc"], preset="nano", seed=4)
    pa, pb, pc = (next(m.model.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert a.context_length == PRESETS["nano"]["context"]
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        create_embedded(preset="huge")


def test_default_preset_is_about_a_million_parameters() -> None:
    model = create_embedded()
    assert 0.5e6 < model.num_params < 2e6


def test_load_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        EmbeddedModel.load(tmp_path)
