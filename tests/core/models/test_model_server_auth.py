"""Issue 26 item 5: the model server (``BackendServer``, what ``RayRunners(host=...)`` serves the trainer's
model on) follows the store's bind rule: a token beyond loopback, every request checked against it.

A real ``BackendServer`` in front of the fake LLM (through ``RemoteBackend``), called by ``HttpBackend`` and by
raw HTTP."""

from __future__ import annotations

import aiohttp
import pytest

from tether.models.base import BackendError, ChatRequest
from tether.models.http_backend import TOKEN_ENV, BackendServer, HttpBackend
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, text

CHAT = ChatRequest(messages=[{"role": "user", "content": "hi"}])


def test_no_token_beyond_loopback_is_refused() -> None:
    with pytest.raises(ValueError, match=r"refusing to serve the model server on '0\.0\.0\.0' without a token"):
        BackendServer(RemoteBackend("http://127.0.0.1:1/v1"), host="0.0.0.0")
    BackendServer(RemoteBackend("http://127.0.0.1:1/v1"), host="0.0.0.0", token="t")  # with one it may


async def test_with_a_token_every_call_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    async with FakeLLM(handler=lambda request: text("hello")) as llm:
        backend = RemoteBackend(llm.base_url)
        async with BackendServer(backend, token="s3cret") as server:
            for client in (HttpBackend(server.url), HttpBackend(server.url, token="wrong")):
                with pytest.raises(BackendError, match="bearer token"):
                    await client.chat(CHAT)
                await client.close()
            good = HttpBackend(server.url, token="s3cret")
            assert (await good.chat(CHAT)).choices[0].message["content"] == "hello"
            await good.close()
            monkeypatch.setenv(TOKEN_ENV, "s3cret")  # how a Ray actor gets it (the session's runtime env)
            from_env = HttpBackend(server.url)
            assert (await from_env.chat(CHAT)).choices[0].message["content"] == "hello"
            await from_env.close()
            async with aiohttp.ClientSession() as http:  # a web page's form post never gets as far as the token
                async with http.post(
                    server.url + "/chat", data=b"{}", headers={"Content-Type": "text/plain"}
                ) as r:
                    assert r.status == 415
        await backend.close()
