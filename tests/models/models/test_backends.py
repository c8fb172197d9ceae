"""EmbeddedBackend and HFBackend through their async ``chat``: batching of concurrent requests, exact token ids,
in-place weight updates, clear errors, and hf: checkpoints with their own chat template."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tether.models import BadRequest, ChatRequest
from tether.models.embedded import EmbeddedBackend, EmbeddedModel, create_embedded
from tether.models.hf import HFBackend

USER = [{"role": "user", "content": "What is 2+2?"}]


def _check_choices(backend: Any, result: Any) -> None:
    assert result.token_ids_available
    for choice in result.choices:
        text = backend.decode(choice.response_token_ids)
        if not choice.message.get("tool_calls"):
            assert text == choice.message["content"]
        assert backend.parse(text)["content"] == choice.message["content"]
        assert len(choice.logprobs) == len(choice.response_token_ids)
        assert all(lp <= 0 for lp in choice.logprobs)
    assert result.usage["prompt_tokens"] == len(result.prompt_token_ids)
    assert result.usage["completion_tokens"] == sum(len(c.response_token_ids) for c in result.choices)


@pytest.fixture
def backend() -> EmbeddedBackend:
    """A fresh nano model per test (tests here may change its weights)."""
    return EmbeddedBackend(model=create_embedded(preset="nano", seed=1))


async def test_concurrent_requests_are_batched(backend: EmbeddedBackend) -> None:
    requests = [
        ChatRequest(messages=[{"role": "user", "content": f"question {i}"}], n=2, max_tokens=8 + i, seed=i)
        for i in range(10)
    ]
    with backend.policy():  # hold the weights so the requests pile up behind the first batch
        tasks = [asyncio.create_task(backend.chat(r)) for r in requests]
        await asyncio.sleep(0.05)
    results = await asyncio.gather(*tasks)
    assert backend.batches <= 2 and backend.rows == 20
    for request, result in zip(requests, results, strict=True):
        assert len(result.choices) == 2
        assert all(len(c.response_token_ids) <= request.max_tokens for c in result.choices)
        _check_choices(backend, result)
    # a request's samples don't depend on what it was batched with
    alone = await backend.chat(requests[3])
    assert [c.response_token_ids for c in alone.choices] == [c.response_token_ids for c in results[3].choices]
    await backend.close()


async def test_weights_updated_in_place_are_used_by_the_next_request(backend: EmbeddedBackend) -> None:
    greedy = ChatRequest(messages=USER, temperature=0.0, max_tokens=12)
    before = await backend.chat(greedy)
    version = backend.weights_version
    with backend.policy() as model, torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    assert backend.weights_version == version + 1
    after = await backend.chat(greedy)
    assert after.choices[0].response_token_ids != before.choices[0].response_token_ids
    assert after.prompt_token_ids == before.prompt_token_ids
    await backend.close()


async def test_stop_and_length_finish_reasons(backend: EmbeddedBackend) -> None:
    result = await backend.chat(ChatRequest(messages=USER, n=4, max_tokens=3, seed=5))
    assert all(c.finish_reason in ("length", "stop") and len(c.response_token_ids) <= 3 for c in result.choices)
    free = await backend.chat(ChatRequest(messages=USER, max_tokens=20, seed=9))
    text = backend.decode(free.choices[0].response_token_ids)
    assert len(text) > 4  # this seed gives a long enough reply to cut
    stopped = await backend.chat(ChatRequest(messages=USER, max_tokens=20, seed=9, stop=[text[2:4]]))
    assert stopped.choices[0].finish_reason == "stop"
    assert text[2:4] not in (stopped.choices[0].message["content"] or "")
    assert text.startswith(stopped.choices[0].message["content"])
    _check_choices(backend, stopped)
    await backend.close()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"messages": []}, "non-empty list"),
        ({"n": 0}, "n must be"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"max_tokens": 5000}, "lower max_tokens to at most"),
        ({"messages": [{"role": "user", "content": "1 " * 2000}]}, "shorten the conversation"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "unknown role"),
        ({"stop": [""]}, "stop must be"),
    ],
)
async def test_bad_requests_are_rejected_clearly(nano: EmbeddedModel, change: dict[str, Any], match: str) -> None:
    backend = EmbeddedBackend(model=nano)
    request = ChatRequest(messages=USER)
    for key, value in change.items():
        setattr(request, key, value)
    with pytest.raises(BadRequest, match=match):
        await backend.chat(request)
    assert backend.batches == 0


async def test_default_embedded_backend_and_checkpoint_dir(nano: EmbeddedModel, nano_dir: Path) -> None:
    default = EmbeddedBackend()
    assert default.embedded.num_params > 500_000
    result = await default.chat(ChatRequest(messages=USER, max_tokens=5))
    _check_choices(default, result)
    await default.close()
    loaded = EmbeddedBackend(str(nano_dir))
    live = EmbeddedBackend(model=nano)
    greedy = ChatRequest(messages=USER, temperature=0.0, max_tokens=10)
    a, b = await loaded.chat(greedy), await live.chat(greedy)
    assert a.choices[0].response_token_ids == b.choices[0].response_token_ids
    await loaded.close()
    await live.close()
    # a closed backend serves again on the next request
    again = await live.chat(greedy)
    assert again.choices[0].response_token_ids == b.choices[0].response_token_ids
    await live.close()


async def test_save_then_serve_from_the_checkpoint(backend: EmbeddedBackend, tmp_path: Path) -> None:
    backend.save(str(tmp_path / "ckpt"))
    greedy = ChatRequest(messages=USER, temperature=0.0, max_tokens=10)
    reloaded = EmbeddedBackend(str(tmp_path / "ckpt"))
    a, b = await backend.chat(greedy), await reloaded.chat(greedy)
    assert a.choices[0].response_token_ids == b.choices[0].response_token_ids
    await backend.close()
    await reloaded.close()


# -- hf: -------------------------------------------------------------------------------------------------


async def test_hf_backend_serves_an_embedded_checkpoint_like_the_embedded_backend(
    nano: EmbeddedModel, nano_dir: Path
) -> None:
    hf, live = HFBackend(str(nano_dir)), EmbeddedBackend(model=nano)
    assert hf.embedded_format and sorted(hf.stop_token_ids) == sorted(live.stop_token_ids)
    request = ChatRequest(messages=USER, temperature=0.0, max_tokens=10, n=2)
    a, b = await hf.chat(request), await live.chat(request)
    assert a.prompt_token_ids == b.prompt_token_ids
    assert [c.response_token_ids for c in a.choices] == [c.response_token_ids for c in b.choices]
    _check_choices(hf, a)
    await hf.close()
    await live.close()


async def test_hf_backend_uses_the_checkpoints_own_chat_template(chatml_dir: Path, calc_tool: Any) -> None:
    hf = HFBackend(str(chatml_dir))
    assert not hf.embedded_format and hf.stop_token_ids == [hf.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    messages = [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "calc", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "42"},
    ]
    result = await hf.chat(ChatRequest(messages=messages, tools=[calc_tool], n=3, max_tokens=12, seed=0))
    prompt = hf.tokenizer.decode(result.prompt_token_ids)
    assert json.dumps(calc_tool["function"]) in prompt  # tools went through apply_chat_template
    assert '<tool_call>{"name": "calc", "arguments": {"x": 1}}</tool_call>' in prompt  # arguments as an object
    assert prompt.endswith("<|im_start|>assistant")
    _check_choices(hf, result)
    with pytest.raises(BadRequest, match="over the model's context"):
        await hf.chat(ChatRequest(messages=messages, max_tokens=1000))
    await hf.close()
    with pytest.raises(ValueError, match="hf:"):
        EmbeddedModel.load(chatml_dir)


def test_hf_backend_errors_name_the_fix(tmp_path: Path, chatml_dir: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        HFBackend(str(tmp_path / "nope"))
    hf = HFBackend(str(chatml_dir))
    hf.tokenizer.chat_template = None
    with pytest.raises(BadRequest, match="no chat template"):
        hf.render(USER, None)


async def test_the_smollm2_template_writes_and_reads_its_tool_calls(chatml_dir: Path, calc_tool: Any) -> None:
    """``model="smollm2"``'s template (tools in ``<tools>``, calls as one JSON list in ``<tool_call>``), on a tiny
    checkpoint: what it renders for a reply is what the parser reads back, several calls included."""
    from tether.models.smollm2 import TEMPLATE

    hf = HFBackend(str(chatml_dir))
    hf.tokenizer.chat_template = TEMPLATE
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": e})}}
        for i, e in enumerate(["1+1", "2*3"])
    ]
    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": None, "tool_calls": calls[:1]},
        {"role": "tool", "tool_call_id": "c0", "content": "2"},
    ]
    prompt = hf.tokenizer.decode(hf.render(messages, [calc_tool]))
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    # each tool on one line, its arguments as name: type (a JSON schema's boilerplate costs prompt tokens)
    assert (
        '<tools>{"name": "calc", "description": "Evaluate arithmetic", "arguments": {"expr": "string"}}</tools>'
        in prompt
    )
    optional = {"type": "string", "description": "Where to go", "enum": ["n", "s"]}
    tool = {
        "name": "go",
        "parameters": {"properties": {"to": optional, "n": {"type": "integer"}}, "required": ["n"]},
    }
    listed = hf.tokenizer.decode(hf.render(messages, [tool]))
    assert (
        '{"name": "go", "arguments": {"to": "string: Where to go, one of n, s (optional)", "n": "integer"}}'
        in listed
    )
    assert (
        '<|im_start|>assistant\n<tool_call>[{"name": "calc", "arguments": {"expr": "1+1"}}]</tool_call>' in prompt
    )
    assert "<|im_start|>tool\n2<|im_end|>" in prompt and prompt.endswith("<|im_start|>assistant\n")
    reply = {"role": "assistant", "content": None, "tool_calls": calls}
    text = hf.decode(hf.render_reply(messages, [calc_tool], reply)).removesuffix("<|im_end|>")
    parsed = hf.parse(text)
    assert [c["function"] for c in parsed["tool_calls"]] == [c["function"] for c in calls]
    assert parsed["content"] is None
    system = [{"role": "system", "content": "Be brief."}, *messages[:1]]
    assert hf.tokenizer.decode(hf.render(system, None)).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    await hf.close()


def test_the_torch_thread_count_is_an_option_of_the_model_string(nano_dir: Path) -> None:
    """``hf:<path>?threads=N`` sets torch's CPU threads (one by default: see ``tether.models.local._backend``)."""
    from tether.models import open_backend

    before = torch.get_num_threads()
    try:
        backend = open_backend(f"hf:{nano_dir}?threads=2")
        assert isinstance(backend, HFBackend) and backend.threads == 2 and torch.get_num_threads() == 2
        assert open_backend(f"hf:{nano_dir}").threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
