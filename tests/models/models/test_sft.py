"""SFT warm start: on a small synthetic tool-calling set, the share of samples in the demonstrated format
rises from ~0 to most; the trained model then emits real tool calls through both backends."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from tether.models import ChatRequest
from tether.models.embedded import EmbeddedBackend, EmbeddedModel, create_embedded, sft, template
from tether.models.embedded.supervised import encode_conversation
from tether.models.hf import HFBackend
from tether.models.local._sampling import SampleParams, generate


def _format_correct(model: EmbeddedModel, make: Any, tool: dict[str, Any]) -> float:
    """Share of T=1 samples in the demonstrated format: a calc call with an expr, or a bare number."""
    rng = random.Random(1)
    prompts, kinds = [], []
    for i in range(48):
        conv = make(rng)
        prompts.append(conv[:2] if i % 2 == 0 else conv[:4])
        kinds.append("call" if i % 2 == 0 else "answer")
    ids = [model.tokenizer.encode(template.render(p, [tool]), add_special_tokens=False) for p in prompts]
    params = [SampleParams(max_tokens=24, temperature=1.0, seed=i) for i in range(len(ids))]
    with torch.inference_mode():
        samples = generate(model.model, model.tokenizer, ids, params, stop_token_ids=model.stop_token_ids)
    good = 0
    for kind, sample in zip(kinds, samples, strict=True):
        message = template.parse(sample.text)
        if sample.finish_reason != "stop":
            continue
        if kind == "call":
            calls = message.get("tool_calls") or []
            good += (
                len(calls) == 1
                and calls[0]["function"]["name"] == "calc"
                and ("expr" in json.loads(calls[0]["function"]["arguments"]))
            )
        else:
            good += not message.get("tool_calls") and (message["content"] or "").isdigit()
    return good / len(samples)


def test_loss_only_on_assistant_tokens(nano: EmbeddedModel, make_calc_conversation: Any, calc_tool: Any) -> None:
    conv = make_calc_conversation(random.Random(0))
    ids, labels = encode_conversation(nano.tokenizer, conv, [calc_tool])
    assert len(ids) == len(labels)
    assert nano.tokenizer.decode(ids) == template.render(conv, [calc_tool], add_generation_prompt=False)
    trained = nano.tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
    call = conv[2]["tool_calls"][0]["function"]
    assert trained == f"<|call|>calc{call['arguments']}<|end|>{conv[4]['content']}<|end|>"


def test_sft_rejects_useless_input(nano: EmbeddedModel) -> None:
    with pytest.raises(ValueError, match="at least one"):
        sft(nano, [])
    with pytest.raises(ValueError, match="no assistant message"):
        sft(nano, [[{"role": "user", "content": "hi"}]], progress=False)


@pytest.mark.slow
async def test_sft_teaches_the_tool_call_format(
    make_calc_conversation: Any, calc_tool: Any, tmp_path: Path
) -> None:
    rng = random.Random(0)
    demos = [make_calc_conversation(rng) for _ in range(400)]
    model = create_embedded([json.dumps(d) for d in demos[:50]], preset="nano", seed=0)
    before = _format_correct(model, make_calc_conversation, calc_tool)
    metrics = sft(model, demos, [calc_tool], epochs=10, lr=3e-3, batch_size=16, seed=0, progress=False)
    after = _format_correct(model, make_calc_conversation, calc_tool)
    assert before <= 0.1
    assert after >= 0.7, (before, after, metrics)
    assert metrics["loss_last"] < metrics["loss_first"] / 4

    # served: the tool call arrives as OpenAI tool_calls, through both backends
    model.save(tmp_path / "ckpt")
    question = make_calc_conversation(random.Random(5))[:2]
    for backend in (EmbeddedBackend(model=model), HFBackend(str(tmp_path / "ckpt"))):
        result = await backend.chat(ChatRequest(messages=question, tools=[calc_tool], temperature=0.0))
        choice = result.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        assert choice.message["tool_calls"][0]["function"]["name"] == "calc"
        text = backend.decode(choice.response_token_ids)
        assert text.startswith("<|call|>calc{") and template.parse(text)["tool_calls"]
        await backend.close()


async def test_sft_on_a_live_backend_updates_what_it_serves(make_calc_conversation: Any, calc_tool: Any) -> None:
    backend = EmbeddedBackend(model=create_embedded(preset="nano", seed=2))
    greedy = ChatRequest(messages=make_calc_conversation(random.Random(3))[:2], tools=[calc_tool], temperature=0.0)
    before = await backend.chat(greedy)
    version = backend.weights_version
    demos = [make_calc_conversation(random.Random(i)) for i in range(8)]
    sft(backend, demos, [calc_tool], epochs=2, batch_size=4, progress=False)
    assert backend.weights_version == version + 1 and not backend.model.training
    after = await backend.chat(greedy)
    assert after.choices[0].response_token_ids != before.choices[0].response_token_ids
    await backend.close()
