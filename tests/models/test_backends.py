"""EmbeddedBackend and HFBackend through their async ``chat``: batching of concurrent requests, exact token ids,
in-place weight updates, clear errors, and hf: checkpoints with their own chat template."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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

CHATML = (
    "{%- if tools %}<|im_start|>system\nTools:\n{%- for t in tools %}\n{{ t.function | tojson }}{%- endfor %}"
    '\nCall one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{%- endif %}'
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments}"
    " | tojson }}</tool_call>{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A non-embedded checkpoint: its own tokenizer, ChatML template with tools, Hermes tool calls."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, the tool call answer is 42"] * 20, trainer=trainer)
    tok.add_tokens([AddedToken("<tool_call>"), AddedToken("</tool_call>")])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("chatml")
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


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
    with pytest.raises(FileNotFoundError, match="never downloads"):
        HFBackend(str(tmp_path / "nope"))
    hf = HFBackend(str(chatml_dir))
    hf.tokenizer.chat_template = None
    with pytest.raises(BadRequest, match="no chat template"):
        hf.render(USER, None)
