"""Exact trajectory packing on real multi-turn rollouts of the embedded model (issue 36): a plain-openai agent
that keeps talking to the model, run through ``Trainer.dev``, so the prompts are what the embedded chat
template really renders. The calls that extend each other exactly are merged (fewer sequences than calls),
and a packed update's loss and gradient, with each micro-batch's common prompt prefix (the agent's system
prompt) computed once, equal the per-call update's without either within 1e-5; a reply the agent edits
before sending it back, and another sub-agent's call in between, start new sequences."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")
torch = pytest.importorskip("torch")

import tether  # noqa: E402
from tether.algorithms.batching import assemble, context_length  # noqa: E402
from tether.algorithms.grpo import GRPO  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.models.embedded import EmbeddedModel  # noqa: E402
from tether.training.signal.packing import pack_calls  # noqa: E402
from tether.types import Transition  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
TURNS = 3
#: every conversation starts with it: the prefix a micro-batch's rows share (tether.training.signal.prefix)
SYSTEM = "You pick letters. Answer with one letter of the alphabet, nothing else, every time you are asked."


def _ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
    reply = client.chat.completions.create(model="toy", messages=messages, max_tokens=6)
    message = reply.choices[0].message
    return {"role": "assistant", "content": message.content or ""}


def chat(task: str, system: str | None = None) -> str:
    """Three turns of one conversation, each reply sent back as the model wrote it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": task})
    for turn in range(TURNS):
        messages.append(_ask(messages))
        messages.append({"role": "user", "content": f"Another letter, turn {turn}."})
    return str(messages[-2]["content"])


def briefed(task: str) -> str:
    """``chat`` after a system prompt (a micro-batch's rows share it)."""
    return chat(task, SYSTEM)


def edited(task: str) -> str:
    """The same conversation, but the agent rewrites each reply before sending it back (the history the model
    sees next is not what it sampled)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for turn in range(TURNS):
        reply = _ask(messages)
        messages.append({"role": "assistant", "content": f"[{reply['content']}]"})
        messages.append({"role": "user", "content": f"Another letter, turn {turn}."})
    return str(messages[-2]["content"])


def with_a_checker(task: str) -> str:
    """A writer's two turns with a checker's call (its own conversation, same model) in between."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    with agent_scope("writer"):
        messages.append(_ask(messages))
    with agent_scope("checker"):
        _ask([{"role": "user", "content": f"Check: {messages[-1]['content']}"}])
    messages.append({"role": "user", "content": "Another letter."})
    with agent_scope("writer"):
        messages.append(_ask(messages))
    return str(messages[-1]["content"])


def reward(task: str, output: str) -> float:
    return float(output.strip()[:1] in ("a", "b"))


def multi_turn_transitions(agent: Any, model: str, tmp_path: Path, n: int = 4) -> list[Transition]:
    """The calls of ``n`` real rollouts of ``model`` (sampled at temperature 1, logprobs recorded), with
    advantages ±1 by rollout and +0.5 on every second call (each call keeps its own)."""
    trainer = tether.Trainer(
        model=model,
        store=f"sqlite:///{tmp_path / 'calls.db'}",
        progress=False,
        sampling={"temperature": 1.0},
    )
    report = trainer.dev(tether.wrap(agent, reward=reward), [f"Pick a letter, round {i}." for i in range(n)])
    out = []
    for r, rollout in enumerate(report):
        for t in rollout.transitions:
            sign = 1.0 if r % 2 else -1.0
            out.append(dataclasses.replace(t, advantage=sign + 0.5 * (t.step % 2), trainable=True))
    assert out and all(t.prompt_token_ids and t.response_token_ids for t in out)
    return out


def _loss_and_grads(
    model: Any, batch: Sequence[Transition], pad_token_id: int, weights_version: int | None = None, **kwargs: Any
) -> tuple[dict[str, float], list[Any]]:
    algo = GRPO(group_size=2, lr=0.0, max_grad_norm=1e9, **kwargs)
    metrics = algo.update(model, batch, pad_token_id=pad_token_id, weights_version=weights_version)
    return metrics, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def assert_packed_equals_per_call(
    model: Any, batch: Sequence[Transition], pad_token_id: int = 0, shared_tolerance: float = 1e-5, **kwargs: Any
) -> dict[str, float]:
    """GRPO's update (lr 0) packed against one row per call, neither sharing prefixes: the same loss, gradients
    (each tensor within 1e-5, relative to its largest entry where that exceeds 1: float32 sums in another order)
    and per-call figures. Then packed with the micro-batches' shared prefixes (the default) against the same rows,
    within ``shared_tolerance`` (its passes sum in another order again); returns that update's metrics."""
    rows, row_grads = _loss_and_grads(model, batch, pad_token_id, pack=False, **{**kwargs, "share_prefix": False})
    assert rows["sequences"] == len(batch) and rows["tokens_saved"] == 0 and rows["tokens_shared"] == 0
    out = {}
    for share, tolerance in ((False, 1e-5), (kwargs.get("share_prefix", True), shared_tolerance)):
        packed, grads = _loss_and_grads(model, batch, pad_token_id, pack=True, **{**kwargs, "share_prefix": share})
        assert abs(packed["loss"] - rows["loss"]) < tolerance, (share, packed["loss"], rows["loss"])
        assert len(grads) == len(row_grads) > 0
        for a, b in zip(grads, row_grads, strict=True):  # within the tolerance of the tensor's scale
            diff = float((a - b).abs().max())
            assert diff <= tolerance * max(1.0, float(b.abs().max())), (share, diff)
        for key in ("drift_tokens", "drift_refused", "trained_transitions", "tokens_trained", "clip_frac"):
            assert packed[key] == pytest.approx(rows[key], abs=1e-6), key
        assert packed["drift_mean"] == pytest.approx(rows["drift_mean"], abs=1e-6)
        assert packed["tokens_saved"] == rows["tokens_computed"] - packed["tokens_computed"]
        assert share or packed["tokens_shared"] == 0
        out = packed
    return out


def test_a_multi_turn_rollout_packs_and_trains_as_its_calls_would(warm_start: Path, tmp_path: Path) -> None:
    batch = multi_turn_transitions(briefed, f"embedded:{warm_start}", tmp_path)
    model = EmbeddedModel.load(warm_start).model
    sequences = pack_calls(batch, context_length(model))
    assert len(batch) == 4 * TURNS and len(sequences) < len(batch), [len(s.calls) for s in sequences]
    for sequence in sequences:  # every call's response sits where its own row has it, after its own prompt
        for call in sequence.calls:
            t = batch[call.index]
            assert sequence.token_ids[: call.start] == tuple(t.prompt_token_ids)
            assert sequence.token_ids[call.start : call.end] == tuple(t.response_token_ids)
    packed = assert_packed_equals_per_call(model, batch)
    assert packed["sequences"] == len(sequences)
    assert packed["tokens_saved"] > 0 and packed["tokens_trained"] == sum(len(t.response_token_ids) for t in batch)
    # the system prompt and more, computed once per micro-batch of 4 sequences (the rollouts' first prompts differ
    # after "round "): at least the system prompt's tokens for each row but the first
    system = len(EmbeddedModel.load(warm_start).tokenizer(SYSTEM)["input_ids"])
    assert packed["tokens_shared"] >= (len(sequences) - 1) * system, packed["tokens_shared"]
    # with a KL penalty (the reference's pass shares the prefix too), still the same
    with_kl = assert_packed_equals_per_call(model, batch, kl_coef=0.1)
    assert with_kl["tokens_shared"] == packed["tokens_shared"]
    # with token-budget micro-batches and gradient checkpointing (no shared prefix: the backward pass's
    # recomputation would extend the cache again), still the same
    checkpointed = assert_packed_equals_per_call(model, batch, micro_batch_tokens=64, gradient_checkpointing=True)
    assert checkpointed["tokens_shared"] == 0


def test_a_call_whose_drift_is_refused_leaves_the_rest_of_its_sequence_training(
    warm_start: Path, tmp_path: Path
) -> None:
    batch = multi_turn_transitions(chat, f"embedded:{warm_start}", tmp_path, n=2)
    model = EmbeddedModel.load(warm_start).model
    middle = next(t for t in batch if t.step == 1)  # the second call of a packed rollout: sampled "elsewhere"
    batch[batch.index(middle)] = dataclasses.replace(middle, logprobs=[lp - 2.0 for lp in middle.logprobs or []])
    assert len(pack_calls(batch, context_length(model))) < len(batch)
    packed = assert_packed_equals_per_call(model, batch)
    assert packed["drift_refused"] == 1 and packed["trained_transitions"] == len(batch) - 1
    assert packed["tokens_trained"] == sum(len(t.response_token_ids) for t in batch) - len(
        middle.response_token_ids
    )


def test_each_call_keeps_its_own_version_on_policy_flag_and_staleness(warm_start: Path, tmp_path: Path) -> None:
    """Versions by call inside packed rollouts: the current weights' calls train on the trainer's own logprobs,
    an older allowed call on its recorded ones, a too-old call is dropped (the calls after it still merge over
    it: their prompts extend the earlier call's exactly). The same update as per-call rows."""
    batch = multi_turn_transitions(chat, f"embedded:{warm_start}", tmp_path, n=2)
    model = EmbeddedModel.load(warm_start).model
    versions = {0: 2, 1: 1, 2: 3}  # step -> the weights version that sampled it (the update's is 3)
    batch = [
        dataclasses.replace(t, weights_version=versions[t.step], logprobs=[lp + 0.3 for lp in t.logprobs or []])
        for t in batch
    ]
    kept = [t for t in batch if t.step != 1]
    assert len(pack_calls(kept, context_length(model))) == 2  # step 2 extends step 0 across the dropped step 1
    settings = {"max_staleness": 1, "max_row_drift": None}
    packed, packed_grads = _loss_and_grads(model, batch, 0, pack=True, weights_version=3, **settings)
    rows, row_grads = _loss_and_grads(model, batch, 0, pack=False, weights_version=3, **settings)
    assert packed["stale_dropped"] == rows["stale_dropped"] == 2 and packed["sequences"] == 2
    assert abs(packed["loss"] - rows["loss"]) < 1e-5
    for a, b in zip(packed_grads, row_grads, strict=True):
        assert float((a - b).abs().max()) <= 1e-5 * max(1.0, float(b.abs().max()))
    # the recorded (shifted) logprobs count for the older calls only: the current ones' shift changes nothing
    shifted = [
        dataclasses.replace(t, logprobs=[lp + 1.0 for lp in t.logprobs or []]) if t.step == 2 else t for t in batch
    ]
    again, _ = _loss_and_grads(model, shifted, 0, pack=True, weights_version=3, **settings)
    assert abs(again["loss"] - packed["loss"]) < 1e-7


def test_an_edited_history_is_not_merged(warm_start: Path, tmp_path: Path) -> None:
    batch = multi_turn_transitions(edited, f"embedded:{warm_start}", tmp_path, n=2)
    model = EmbeddedModel.load(warm_start).model
    assert len(pack_calls(batch, context_length(model))) == len(batch) == 2 * TURNS
    packed = assert_packed_equals_per_call(model, batch)
    # nothing merged: whatever was saved is the micro-batches' shared prefixes'
    assert packed["tokens_saved"] == packed["tokens_shared"]


def test_another_sub_agent_in_between_starts_a_new_sequence(warm_start: Path, tmp_path: Path) -> None:
    batch = multi_turn_transitions(with_a_checker, f"embedded:{warm_start}", tmp_path, n=2)
    assert [t.agent_name for t in batch[:3]] == ["writer", "checker", "writer"]
    model = EmbeddedModel.load(warm_start).model
    sequences = pack_calls(batch, context_length(model))
    assert sorted(len(s.calls) for s in sequences) == [1] * len(batch)
    # the writer's own two calls, alone, do extend each other exactly: packing merges them
    writers = [t for t in batch if t.agent_name == "writer"]
    assert len(pack_calls(writers, context_length(model))) == len(writers) // 2
    assert_packed_equals_per_call(model, writers)


def test_assemble_gives_each_call_its_own_advantage_and_logprobs(warm_start: Path, tmp_path: Path) -> None:
    batch = multi_turn_transitions(chat, f"embedded:{warm_start}", tmp_path, n=1)
    (sequence,) = pack_calls(batch, 1 << 30)
    ids, mask, old, adv, owner = assemble([sequence], batch, 0)
    assert ids.shape == (1, len(sequence.token_ids)) and mask.shape == old.shape == adv.shape == owner.shape
    for call in sequence.calls:
        t = batch[call.index]
        span = slice(call.start - 1, call.end - 1)
        assert bool((owner[0, span] == call.index).all()) and bool((mask[0, span] == 1).all())
        assert bool((adv[0, span] == t.advantage).all())
        assert torch.allclose(old[0, span], torch.tensor(t.logprobs))
    assert int(mask.sum()) == sum(len(t.response_token_ids) for t in batch) == int((owner >= 0).sum())


def test_sft_packs_a_multi_turn_demonstration_rendered_by_the_template(
    nano: EmbeddedModel, make_calc_conversation: Any, calc_tool: Any
) -> None:
    """WarmStart's demonstrations are multi-turn rollouts tokenized with the student's template
    (``sft_data.tokenize``): a rollout's second call extends its first exactly, so SFT trains it as one
    sequence, with the loss and gradient of one row per call."""
    import copy
    import random

    from tether.algorithms.sft import SFT, _shuffled, _steps, _transition
    from tether.algorithms.sft_data import Example, tokenize
    from tether.models.embedded import EmbeddedBackend

    rng = random.Random(0)
    examples = []
    for r in range(4):
        conversation = make_calc_conversation(rng)
        for k in (2, 4):  # the two assistant turns: the tool call, then the answer
            examples.append(
                Example(f"r{r}", "agent", conversation[:k], [calc_tool], conversation[k], [], [], imported=False)
            )
    backend = EmbeddedBackend(model=copy.deepcopy(nano))
    assert tokenize(examples, backend, retokenize=True) == len(examples)
    rows = [_transition(e, "default", n) for e, n in zip(examples, _steps(examples), strict=True)]
    order = _shuffled(rows, random.Random(1), by_rollout=True)
    assert [rows[i].rollout_id for i in order[::2]] == [rows[i].rollout_id for i in order[1::2]]  # kept together
    assert [rows[i].step for i in order] == [0, 1] * 4
    results = []
    for pack in (True, False):  # packed with shared prefixes, against one row per call without them
        model = copy.deepcopy(nano.model)
        metrics = SFT(lr=1e-9, pack=pack, share_prefix=pack).update(model, rows, pad_token_id=backend.pad_token_id)
        results.append((metrics, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    # the user's own activation checkpointing on the model: nothing can be shared, and nothing is counted so
    model = copy.deepcopy(nano.model)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    metrics = SFT(lr=1e-9, pack=True, share_prefix=True).update(model, rows, pad_token_id=backend.pad_token_id)
    results.append((metrics, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (packed, packed_grads), (per_call, per_call_grads), (checkpointed, checkpointed_grads) = results
    assert packed["sequences"] == 4 and per_call["sequences"] == 8 and packed["tokens_saved"] > 0
    assert packed["tokens_shared"] > 0 and per_call["tokens_shared"] == 0  # (the system prompt and the tool)
    assert checkpointed["sequences"] == 4 and checkpointed["tokens_shared"] == 0
    assert checkpointed["tokens_computed"] == packed["tokens_computed"] + packed["tokens_shared"]
    for metrics, grads in ((packed, packed_grads), (checkpointed, checkpointed_grads)):
        assert abs(metrics["loss"] - per_call["loss"]) < 1e-5
        for a, b in zip(grads, per_call_grads, strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_a_fit_step_reports_its_packing_in_the_metrics(warm_start: Path, tmp_path: Path) -> None:
    """``Trainer.fit`` with GRPO on the multi-turn agent: each train record (``metrics.jsonl``) says how many
    sequences its calls packed into and the tokens that saved."""
    import json

    trainer = tether.Trainer(
        model=f"embedded:{warm_start}",
        algorithm=GRPO(group_size=4, tasks_per_step=4, lr=1e-4),
        n_runners=4,
        steps=1,
        name="packed",
        run_root=str(tmp_path),
        progress=False,
        sampling={"max_tokens": 6},
    )
    # the last reply's letter: half of the warm start's letters score, so a group scoring all alike is rare
    agent = tether.wrap(chat, reward=lambda task, output: float(output.strip()[:1] in "abcd"))
    result = trainer.fit(agent, train=[f"Pick a letter, round {i}." for i in range(4)], preflight=False)
    (step,) = [h for h in result.history if h["kind"] == "train"]
    assert step["trained"], step.get("idle")
    assert step["sequences"] < step["trained"] and step["tokens_saved"] > 0 and step["tokens_trained"] > 0
    logged = [json.loads(line) for line in (tmp_path / "packed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["sequences"] for r in logged if r.get("kind") == "train"] == [step["sequences"]]
