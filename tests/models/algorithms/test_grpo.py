"""GRPO on a tiny real Llama: gradients only from trainable, informative transitions; learning a toy task;
optimizer state round-trips."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tether.algorithms import credit_advantages
from tether.algorithms.grpo import GRPO
from tether.training.signal.batch import RolloutResult
from tether.types import Rollout, RolloutStatus, Transition

VOCAB = 16
PROMPT = [1, 2, 3]
TARGET = 7


def _model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config)


def _credit(rollouts: list[Rollout], batch: list[Transition]) -> list[Transition]:
    """Give each transition its rollout's group advantage (the episode rule); the trainable, informative ones."""
    reward = {r.rollout_id: r.reward for r in rollouts}
    for t in batch:
        t.target_reward = reward[t.rollout_id]  # as ``build_transitions`` gives each call its rollout's reward
    results = [
        RolloutResult(r, [], 1, [t for t in batch if t.rollout_id == r.rollout_id], [], {"agent"})
        for r in rollouts
    ]
    trained, _ = credit_advantages(results)
    return trained


def _transition(rid: str, response: list[int], logprobs: list[float], trainable: bool = True) -> Transition:
    return Transition(
        rollout_id=rid,
        attempt_id="a",
        task_id="t",
        agent_name="agent",
        step=0,
        messages=[],
        response={},
        prompt_token_ids=list(PROMPT),
        response_token_ids=response,
        logprobs=logprobs,
        reward=0.0,
        trainable=trainable,
    )


def _sample(model: LlamaForCausalLM, n: int, gen: torch.Generator) -> tuple[list[int], list[float]]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1]
    logp = torch.log_softmax(logits, -1)
    tokens = torch.multinomial(logp.exp(), n, replacement=True, generator=gen)
    return tokens.tolist(), [float(logp[t]) for t in tokens]


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _changed(before: list[torch.Tensor], model: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_untrainable_transitions_get_no_gradient() -> None:
    model = _model()
    before = _params(model)
    rollouts = [
        Rollout(rollout_id="r1", input="", task_id="t", status=RolloutStatus.SUCCEEDED, reward=1.0),
        Rollout(rollout_id="r2", input="", task_id="t", status=RolloutStatus.SUCCEEDED, reward=0.0),
    ]
    batch = [_transition("r1", [5], [-2.0], trainable=False), _transition("r2", [6], [-2.0], trainable=False)]
    _credit(rollouts, batch)
    metrics = GRPO(group_size=2).update(model, batch)
    assert metrics["trained_transitions"] == 0
    assert not _changed(before, model)


def test_untrainable_transitions_do_not_change_the_update() -> None:
    a, b = _model(), _model()
    trainable = [_transition("r1", [5], [-2.7]), _transition("r2", [6], [-2.7])]
    trainable[0].advantage, trainable[1].advantage = 1.0, -1.0
    noise = [_transition("r3", [9, 9, 9], [-2.0] * 3, trainable=False)]
    noise[0].advantage = 5.0
    GRPO(group_size=2).update(a, trainable)
    GRPO(group_size=2).update(b, copy.deepcopy(trainable) + noise)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb)


def test_a_flat_group_contributes_no_gradient() -> None:
    model = _model()
    before = _params(model)
    rollouts = [
        Rollout(rollout_id=r, input="", task_id="t", status=RolloutStatus.SUCCEEDED, reward=1.0) for r in "ab"
    ]
    batch = [_transition("a", [5], [-2.0]), _transition("b", [6], [-2.0])]
    assert _credit(rollouts, batch) == []
    GRPO(group_size=2).update(model, batch)
    assert not _changed(before, model)


def test_grpo_raises_reward_on_a_toy_task_with_a_fixed_seed() -> None:
    model = _model(seed=1)
    gen = torch.Generator().manual_seed(0)
    algo = GRPO(group_size=16, lr=3e-2)

    def success_rate() -> float:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1]
        return float(torch.softmax(logits, -1)[TARGET])

    start = success_rate()
    for step in range(25):
        tokens, logprobs = _sample(model, algo.group_size, gen)
        rollouts = [
            Rollout(
                rollout_id=f"{step}-{i}",
                input="",
                task_id="t",
                status=RolloutStatus.SUCCEEDED,
                reward=float(tok == TARGET),
            )
            for i, tok in enumerate(tokens)
        ]
        batch = [
            _transition(f"{step}-{i}", [tok], [lp])
            for i, (tok, lp) in enumerate(zip(tokens, logprobs, strict=True))
        ]
        _credit(rollouts, batch)
        algo.update(model, batch)
    end = success_rate()
    assert start < 0.2
    assert end > start + 0.4, f"P(target) went from {start:.3f} to {end:.3f}"


def test_missing_prompt_ids_is_a_clear_error() -> None:
    t = _transition("r", [5], [-1.0])
    t.prompt_token_ids = []
    t.advantage = 1.0
    with pytest.raises(ValueError, match="has no prompt token ids"):
        GRPO(group_size=2).update(_model(), [t])


def test_optimizer_state_round_trips() -> None:
    model = _model()
    algo = GRPO(group_size=2)
    t = _transition("r", [5], [-2.0])
    t.advantage = 1.0
    algo.update(model, [t])
    state = algo.state_dict()
    fresh = GRPO(group_size=2)
    fresh.load_state_dict(model, state)
    assert fresh.state_dict()["optimizer"]["state"].keys() == state["optimizer"]["state"].keys()


def test_group_size_must_allow_comparison() -> None:
    with pytest.raises(ValueError, match="group_size >= 2"):
        GRPO(group_size=1)
