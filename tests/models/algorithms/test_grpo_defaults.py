"""GRPO's defaults by model: the learning rate by what trains (full weights or LoRA, by size), and the KL
reference of a LoRA model, which is its base with the adapters off, not a copy."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tether.algorithms.grpo import GRPO
from tether.algorithms.grpo.defaults import default_lr, is_lora
from tether.types import Transition

pytest.importorskip("peft")

from tether.models.lora import LoRA, attach

PROMPT = [1, 2, 3]


def _llama(hidden: int, layers: int, vocab: int = 32, device: str = "cpu") -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    with torch.device(device):  # "meta": the shape and parameter count without the memory
        return LlamaForCausalLM(config)


def _batch(advantages: list[float]) -> list[Transition]:
    return [
        Transition(
            rollout_id=f"r{i}",
            attempt_id="a",
            task_id="t",
            agent_name="agent",
            step=0,
            messages=[],
            response={},
            prompt_token_ids=list(PROMPT),
            response_token_ids=[5 + i, 9],
            logprobs=None,
            reward=0.0,
            trainable=True,
            advantage=a,
        )
        for i, a in enumerate(advantages)
    ]


def test_the_learning_rate_defaults_by_what_trains() -> None:
    tiny = _llama(32, 1)
    assert default_lr(tiny) == 5e-4  # the embedded model's size: what its examples train at
    assert default_lr(_llama(512, 24, vocab=32_000, device="meta")) == 1e-5  # ~135M: a small pretrained model
    big = _llama(2048, 24, vocab=32_000, device="meta")  # ~1.3B
    assert default_lr(big) == 1e-6
    assert not is_lora(tiny) and is_lora(attach(_llama(32, 1), LoRA(r=4)))
    assert default_lr(attach(_llama(32, 1), LoRA(r=4))) == 5e-4
    assert default_lr(attach(big, LoRA(r=4))) == 2e-4  # counted on the base, not the adapters
    # the optimizer gets it, and the metrics say which; an explicit lr wins
    assert GRPO(group_size=2).update(_llama(32, 1), _batch([1.0, -1.0]))["lr"] == 5e-4
    assert GRPO(group_size=2, lr=1e-3).update(_llama(32, 1), _batch([1.0, -1.0]))["lr"] == 1e-3
    with pytest.raises(ValueError, match="lr >= 0"):
        GRPO(lr=-1e-4)


def _logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


def test_the_kl_reference_of_lora_is_the_base_with_adapters_off() -> None:
    base = _llama(32, 1)
    plain = _logprobs(base, [*PROMPT, 5, 9])
    model = attach(base, LoRA(r=4, alpha=8))
    algo = GRPO(group_size=2, kl_coef=0.5, lr=5e-2)
    batch = _batch([1.0, -1.0])
    first = algo.update(model, batch)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: the policy is the base
    assert not algo._reference.holds_copy  # no deep copy of the model
    second = algo.update(model, batch)
    trained = _logprobs(model, [*PROMPT, 5, 9])
    assert not torch.allclose(trained, plain)  # the adapter moved ...
    with model.disable_adapter():
        torch.testing.assert_close(_logprobs(model, [*PROMPT, 5, 9]), plain)  # ... the base did not
    assert second["kl"] > 0
    # full weights: a frozen copy as the first update found them
    full = GRPO(group_size=2, kl_coef=0.5, lr=5e-2)
    full.update(_llama(32, 1), batch)
    assert full._reference.holds_copy
