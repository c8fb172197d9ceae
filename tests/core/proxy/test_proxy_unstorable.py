"""Issue 37 item 3: a call the proxy answers is recorded, or its client gets an error. A backend answer with a
token id beyond 64 bits (which no store can hold) used to be answered 200 and its record dropped; now the client
gets 502 and the attempt records the failed call. A real proxy in front of the fake LLM, a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tether import spans
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.sqlite import SqliteStore
from tether.testing.fake_llm import FakeLLM, Reply
from tether.types import RolloutSpec, SpanKind

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("bad", [2**64 - 1, 2**63, 1e30])
async def test_an_unstorable_answer_is_an_error_to_the_client_and_on_record(tmp_path: Path, bad: float) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.enqueue([RolloutSpec(input="q")])
    ((rollout, attempt),) = await store.dequeue("w", limit=1)
    replies = iter([Reply(content="ok", token_ids=[1, bad]), Reply(content="ok")])
    try:
        async with (
            FakeLLM(handler=lambda request: next(replies)) as llm,
            SpanBatcher(store) as batcher,
            ProxyServer(
                RemoteBackend(llm.base_url, return_token_ids=True), batcher=batcher, close_backend=True
            ) as proxy,
            proxy.attempt(rollout.rollout_id, attempt.attempt_id) as url,
            aiohttp.ClientSession() as http,
        ):
            async with http.post(url + "/chat/completions", json=CHAT) as r:
                assert r.status == 502
                assert "does not fit in 64 bits" in (await r.json())["error"]["message"]
            async with http.post(url + "/chat/completions", json=CHAT) as r:
                assert r.status == 200
            await proxy.flush()
            assert batcher.dropped == 0
        recorded = [s for s in await store.get_spans(attempt.attempt_id) if s.kind == SpanKind.LLM]
        assert [s.name == spans.LLM_CALL_FAILED for s in recorded] == [True, False]
        assert "does not fit in 64 bits" in str(recorded[0].attributes.get(spans.ERROR))
    finally:
        await store.close()
