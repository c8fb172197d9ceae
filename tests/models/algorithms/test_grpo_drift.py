"""GRPO's update on real models: the weights version from the sampler to the transition, stale data dropped,
trainer-vs-sampler logprob drift measured, token-budget micro-batches and gradient checkpointing leaving the
gradient unchanged."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from tether.algorithms.batching import pack
from tether.algorithms.grpo import GRPO
from tether.capture.span_batcher import SpanBatcher
from tether.models import ChatRequest
from tether.models.embedded import EmbeddedBackend, EmbeddedModel, create_embedded
from tether.proxy import ProxyServer
from tether.spans import WEIGHTS_VERSION
from tether.store.memory import MemoryStore
from tether.training.signal.transitions import build_transitions
from tether.types import RolloutSpec, Transition

QUESTIONS = ["What is 2+2?", "Name a colour.", "Pick a letter, round 3.", "What is 12+7?"]


@pytest.fixture
def backend() -> EmbeddedBackend:
    """A fresh nano model per test (tests here update its weights)."""
    return EmbeddedBackend(model=create_embedded(preset="nano", seed=1))


async def _sampled(backend: EmbeddedBackend, n: int = 4, max_tokens: int = 24) -> list[Transition]:
    """Transitions of real samples at temperature 1 (the recorded logprobs are the sampler's), advantages ±1."""
    out: list[Transition] = []
    for q, question in enumerate(QUESTIONS):
        request = ChatRequest(messages=[{"role": "user", "content": question}], n=n, max_tokens=max_tokens, seed=q)
        result = await backend.chat(request)
        for i, choice in enumerate(result.choices):
            out.append(
                Transition(
                    rollout_id=f"r{q}-{i}",
                    attempt_id="a",
                    task_id=f"t{q}",
                    agent_name="agent",
                    step=0,
                    messages=request.messages,
                    response=choice.message,
                    prompt_token_ids=list(result.prompt_token_ids or []),
                    response_token_ids=list(choice.response_token_ids or []),
                    logprobs=list(choice.logprobs or []),
                    reward=0.0,
                    trainable=True,
                    advantage=1.0 if i % 2 else -1.0,
                    weights_version=result.weights_version,
                )
            )
    await backend.close()
    return out


def _update(backend: EmbeddedBackend, algo: GRPO, batch: Sequence[Transition]) -> dict[str, float]:
    with backend.policy() as model:
        return algo.update(
            model, batch, pad_token_id=backend.pad_token_id, weights_version=backend.weights_version
        )


# -- the weights version ------------------------------------------------------------------------------------


async def test_the_local_backend_reports_the_version_that_sampled(backend: EmbeddedBackend) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    first = await backend.chat(request)
    assert first.weights_version == backend.weights_version == 0
    with backend.policy():  # a request queued while the weights are held is sampled by the new ones
        queued = asyncio.create_task(backend.chat(request))
        await asyncio.sleep(0.05)
    assert (await queued).weights_version == backend.weights_version == 1
    await backend.close()


async def test_the_proxy_span_and_the_transition_carry_the_version(backend: EmbeddedBackend) -> None:
    openai = pytest.importorskip("openai")
    store = MemoryStore()
    await store.enqueue([RolloutSpec(input="q")])
    ((rollout, attempt),) = await store.dequeue("w")
    async with (
        SpanBatcher(store) as batcher,
        ProxyServer(backend, batcher=batcher, close_backend=True) as proxy,
        proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
    ):
        client = openai.AsyncOpenAI(base_url=url, api_key="k")
        messages = [{"role": "user", "content": "hi"}]
        await client.chat.completions.create(model="m", messages=messages, max_tokens=4)
        with backend.policy():
            pass
        await client.chat.completions.create(model="m", messages=messages, max_tokens=4)
        await client.close()
        await proxy.flush()
    spans = await store.get_spans(attempt.attempt_id)
    assert [s.attributes[WEIGHTS_VERSION] for s in spans] == [0, 1]
    report = build_transitions(rollout, spans)
    assert [t.weights_version for t in report.transitions] == [0, 1]


# -- stale data ---------------------------------------------------------------------------------------------


async def test_transitions_older_than_the_allowed_staleness_are_dropped(backend: EmbeddedBackend) -> None:
    batch = (await _sampled(backend, n=2))[:6]
    for t, version in zip(batch, [3, 3, 2, 2, 1, 1], strict=True):
        t.weights_version = version
    batch[1].weights_version = None  # unknown: kept
    fresh = copy.deepcopy(backend.model)
    metrics = GRPO(group_size=2, max_staleness=1).update(backend.model, batch, weights_version=3)
    assert metrics["stale_dropped"] == 2 and metrics["trained_transitions"] == 4
    # drift is measured on the tokens the current weights sampled (or whose version is unknown) only
    assert metrics["drift_tokens"] == sum(len(t.response_token_ids) for t in batch[:2])
    GRPO(group_size=2).update(fresh, batch[:4])  # the kept four alone, no version check
    for a, b in zip(backend.model.parameters(), fresh.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    strict = GRPO(group_size=2).update(copy.deepcopy(fresh), batch, weights_version=3)
    assert strict["stale_dropped"] == 4 and strict["trained_transitions"] == 2


def test_bad_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        GRPO(max_staleness=-1)
    with pytest.raises(ValueError, match="micro_batch_tokens must be a positive token budget"):
        GRPO(micro_batch_tokens=0)
    with pytest.raises(ValueError, match="drift_threshold must be > 0"):
        GRPO(drift_threshold=0.0)


# -- drift --------------------------------------------------------------------------------------------------


async def test_drift_between_the_embedded_sampler_and_the_trainer_is_small(backend: EmbeddedBackend) -> None:
    batch = await _sampled(backend)
    tokens = sum(len(t.response_token_ids) for t in batch)
    metrics = _update(backend, GRPO(group_size=4), batch)
    print(
        f"\nembedded sampler vs trainer over {tokens} tokens: mean {metrics['drift_mean']:.2g}, "
        f"max {metrics['drift_max']:.2g}, frac>0.1 {metrics['drift_frac']:.0%}"
    )
    assert metrics["drift_tokens"] == tokens > 50
    assert metrics["drift_mean"] < 1e-4 and metrics["drift_max"] < 1e-3 and metrics["drift_frac"] == 0.0


async def test_recorded_logprobs_that_are_off_show_large_drift(backend: EmbeddedBackend) -> None:
    batch = await _sampled(backend)
    off = batch[::2]
    for t in off:  # as if the sampler's logprobs came from other weights, or the ids were retokenized
        t.logprobs = [lp - 1.0 for lp in t.logprobs or []]
    batch[1].logprobs = None  # no recorded logprobs: not measured
    measured = sum(len(t.response_token_ids) for t in batch) - len(batch[1].response_token_ids)
    shifted = sum(len(t.response_token_ids) for t in off)
    metrics = _update(backend, GRPO(group_size=4), batch)
    assert metrics["drift_tokens"] == measured
    assert metrics["drift_frac"] == pytest.approx(shifted / measured)
    assert metrics["drift_mean"] == pytest.approx(shifted / measured, abs=1e-3)
    assert metrics["drift_max"] == pytest.approx(1.0, abs=1e-3)


# -- micro-batches and gradient checkpointing ---------------------------------------------------------------


def test_packing_keeps_each_micro_batch_under_the_token_budget() -> None:
    lengths = [5, 30, 12, 7, 100, 12, 3, 9]
    parts = pack(lengths, max_rows=3, max_tokens=36)
    assert sorted(i for part in parts for i in part) == list(range(len(lengths)))
    for part in parts:
        assert len(part) <= 3
        assert len(part) * max(lengths[i] for i in part) <= 36 or len(part) == 1
    assert [4] in parts and [1] in parts  # rows over the budget go alone
    assert pack(lengths, max_rows=32, max_tokens=None) == [sorted(range(8), key=lengths.__getitem__)]


def _varied(model: EmbeddedModel, count: int = 10) -> list[Transition]:
    """Hand-built transitions of varied lengths, some without recorded logprobs."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.tokenizer.vocab_size if hasattr(model.tokenizer, "vocab_size") else 256
    out = []
    for i in range(count):
        prompt = torch.randint(4, vocab, (3 + 4 * i,), generator=gen).tolist()
        response = torch.randint(4, vocab, (2 + (7 * i) % 13,), generator=gen).tolist()
        out.append(
            Transition(
                rollout_id=f"r{i}",
                attempt_id="a",
                task_id="t",
                agent_name="agent",
                step=0,
                messages=[],
                response={},
                prompt_token_ids=prompt,
                response_token_ids=response,
                logprobs=None if i % 3 == 0 else [-3.0 - 0.1 * j for j in range(len(response))],
                reward=0.0,
                trainable=True,
                advantage=(-1.0) ** i * (1 + i / 10),
            )
        )
    return out


def _gradients(model: torch.nn.Module, algo: GRPO, batch: Sequence[Transition]) -> list[torch.Tensor]:
    """The gradient of one update (lr 0 and no clipping: the weights stay, ``.grad`` is the raw gradient)."""
    algo.update(model, batch)
    return [p.grad.clone() for p in model.parameters() if p.requires_grad and p.grad is not None]


def _layer_calls(model: torch.nn.Module) -> list[int]:
    """A counter of the first MLP's forward runs, inside a decoder layer: a recomputation in the backward pass
    counts (its module hooks don't run again there, so the instance's ``forward`` is wrapped)."""
    calls = [0]
    mlp = next(m for m in model.modules() if type(m).__name__.endswith("MLP"))
    forward = mlp.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return forward(*args, **kwargs)

    mlp.forward = counted
    return calls


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-7), float((x - y).abs().max())


def test_token_budget_micro_batches_give_the_one_batch_gradient(nano: EmbeddedModel) -> None:
    batch = _varied(nano)
    # hand-written logprobs far from the model's: trained all the same here (max_row_drift=None)
    settings = {"group_size": 2, "lr": 0.0, "max_grad_norm": 1e9, "clip_eps": 10.0, "max_row_drift": None}
    whole = GRPO(**settings, micro_batch=64)  # type: ignore[arg-type]
    packed = GRPO(**settings, micro_batch=4, micro_batch_tokens=60)  # type: ignore[arg-type]
    one = _gradients(copy.deepcopy(nano.model), whole, batch)
    model = copy.deepcopy(nano.model)
    many = _gradients(model, packed, batch)
    _same(one, many)
    metrics = packed.update(model, batch)
    assert metrics["micro_batches"] >= 5 and metrics["response_tokens"] == sum(
        len(t.response_token_ids) for t in batch
    )


def test_gradient_checkpointing_gives_the_same_gradient(nano: EmbeddedModel) -> None:
    batch = _varied(nano, count=6)
    settings = {"group_size": 2, "lr": 0.0, "max_grad_norm": 1e9, "max_row_drift": None}
    plain_model = copy.deepcopy(nano.model)
    plain_calls = _layer_calls(plain_model)
    plain = _gradients(plain_model, GRPO(**settings), batch)  # type: ignore[arg-type]
    model = copy.deepcopy(nano.model)
    calls = _layer_calls(model)
    checkpointed = _gradients(model, GRPO(**settings, gradient_checkpointing=True), batch)  # type: ignore[arg-type]
    # transformers 5.x before the rename (5.17 on the GPU machine) has only the ``gradient_checkpointing`` names
    flag = (
        "is_activation_checkpointing"
        if hasattr(model, "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    assert getattr(model, flag)
    assert plain_calls == [1] and calls == [2]  # one micro-batch; its layers ran again in the backward pass
    _same(plain, checkpointed)


def test_gradient_checkpointing_with_a_frozen_base_and_lora(nano: EmbeddedModel) -> None:
    pytest.importorskip("peft")
    from tether.models.lora import LoRA, attach

    batch = _varied(nano, count=6)
    settings = {"group_size": 2, "lr": 0.0, "max_grad_norm": 1e9, "max_row_drift": None}
    lora = LoRA(r=4, alpha=8)
    plain_model = attach(copy.deepcopy(nano.model), lora)
    plain = _gradients(plain_model, GRPO(**settings), batch)  # type: ignore[arg-type]
    model = attach(copy.deepcopy(nano.model), lora)
    model.load_state_dict(plain_model.state_dict())  # the same adapter initialisation
    calls = _layer_calls(model)
    checkpointed = _gradients(model, GRPO(**settings, gradient_checkpointing=True), batch)  # type: ignore[arg-type]
    assert calls == [2] and any(float(g.abs().max()) > 0 for g in checkpointed)  # adapters learn, recomputed
    _same(plain, checkpointed)


async def test_rows_sampled_by_other_weights_are_refused(backend: EmbeddedBackend) -> None:
    """A row whose recorded logprobs the trainer's weights do not reproduce (as when another policy's adapter
    answered it) is refused: counted, and the update is the one of the other rows alone."""
    batch = await _sampled(backend)
    fresh = copy.deepcopy(backend.model)
    off = batch[1::4]
    for t in off:  # a whole nat off on every token: sampled by other weights
        t.logprobs = [lp - 1.0 for lp in t.logprobs or []]
    raw = {"lr": 0.0, "max_grad_norm": 1e9}  # the raw gradient in .grad, the weights unchanged
    metrics = GRPO(group_size=4, **raw).update(backend.model, batch, weights_version=backend.weights_version)
    assert metrics["drift_refused"] == len(off) and metrics["trained_transitions"] == len(batch) - len(off)
    kept = [t for t in batch if t not in off]
    alone = GRPO(group_size=4, **raw).update(fresh, kept)
    assert alone["drift_refused"] == 0 and metrics["loss"] == pytest.approx(alone["loss"], rel=1e-5)
    for a, b in zip(backend.model.parameters(), fresh.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-4)
    allowed = GRPO(group_size=4, max_row_drift=None).update(copy.deepcopy(fresh), batch)
    assert allowed["drift_refused"] == 0 and allowed["trained_transitions"] == len(batch)
    everything = GRPO(group_size=4, max_row_drift=1e-9).update(copy.deepcopy(fresh), batch)
    assert everything["trained_transitions"] == 0 and everything["grad_norm"] == 0.0
    with pytest.raises(ValueError, match="max_row_drift must be > 0"):
        GRPO(max_row_drift=0.0)


def test_each_policy_reports_its_refused_rows_and_the_step_their_sum() -> None:
    """With several policies (one adapter each), a step's metrics keep each policy's drift and refusals apart,
    so rows another policy's adapter answered show on the policy they were sampled for."""
    from tether.algorithms.grpo.policies import merge_metrics

    writer = {
        "trained_transitions": 6.0,
        "drift_refused": 2.0,
        "drift_tokens": 80.0,
        "drift_mean": 0.4,
        "lr": 5e-4,
    }
    checker = {
        "trained_transitions": 8.0,
        "drift_refused": 0.0,
        "drift_tokens": 20.0,
        "drift_mean": 1e-6,
        "lr": 5e-4,
    }
    step = merge_metrics({"writer": writer, "checker": checker})
    assert (
        step["drift_refused"] == 2.0 and step["drift_refused/writer"] == 2.0 and step["drift_refused/checker"] == 0
    )
    assert step["drift_mean"] == pytest.approx((0.4 * 80 + 1e-6 * 20) / 100) and step["drift_mean/writer"] == 0.4
    assert step["lr"] == 5e-4


def test_logprobs_from_the_first_trained_position_match_the_full_pass(nano: EmbeddedModel) -> None:
    """``token_logprobs`` with the response mask projects only from the first trained position: at every trained
    position it gives what the full pass gives, and the gradient through it is the full pass's."""
    from tether.algorithms.batching import assemble, token_logprobs
    from tether.training.signal.packing import pack_calls

    batch = _varied(nano)[4:8]  # prompts of 19-31 tokens: the first trained position is well inside the row
    ids, mask, _, _, _ = assemble(pack_calls(batch, 1 << 30), batch, 0)
    first = int(torch.nonzero(mask.sum(0) > 0)[0, 0])
    assert first > 10
    model = nano.model
    full = token_logprobs(model, ids, 1.0)
    part = token_logprobs(model, ids, 1.0, mask)
    assert part.shape == full.shape and bool((part[:, :first] == 0).all())
    assert torch.allclose(part[mask > 0], full[mask > 0], atol=1e-5)
    grads = []
    for m in (None, mask):
        model.zero_grad(set_to_none=True)
        (token_logprobs(model, ids, 1.0, m) * mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    _same(grads[0], grads[1])


def test_the_current_weights_data_trains_on_the_trainers_own_logprobs(nano: EmbeddedModel) -> None:
    """For rows the weights being updated sampled, the ratio's denominator is the trainer's first pass: the
    gradient does not move with the sampler's recorded logprobs (whose last bits depend on its batching). For
    older rows (allowed by ``max_staleness``) the recorded logprobs are the sampling policy's and do count."""
    settings = {"group_size": 2, "lr": 0.0, "max_grad_norm": 1e9, "max_row_drift": None, "max_staleness": 1}
    model = copy.deepcopy(nano.model)

    def gradient(version: int, shift: float) -> list[torch.Tensor]:
        batch = [
            dataclasses.replace(t, weights_version=version, logprobs=[lp + shift for lp in t.logprobs])
            for t in _varied(nano)
            if t.logprobs
        ]
        GRPO(**settings).update(model, batch, weights_version=3)
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
        return grads

    for a, b in zip(gradient(3, 0.0), gradient(3, 0.05), strict=True):
        assert torch.equal(a, b)
    stale = zip(gradient(2, 0.0), gradient(2, 0.05), strict=True)
    assert any(not torch.allclose(a, b) for a, b in stale)
