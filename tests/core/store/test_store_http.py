"""The HTTP store: the conformance suite through a real server on 127.0.0.1 (memory and SQLite behind it),
plus what only HTTP has: many concurrent writers, bearer tokens, malformed requests, binding rules, and a
server that is not there."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tether import _json
from tether.capture.span_batcher import SpanBatcher
from tether.server import serve, start_server
from tether.store import open_store
from tether.store.base import Store
from tether.store.errors import InvalidInput, NotFound
from tether.store.http.client import HttpStore, StoreUnauthorized, StoreUnavailable
from tether.store.http.server import StoreServer
from tether.store.memory import MemoryStore
from tether.store.sqlite import SqliteStore
from tether.testing.store_conformance import StoreConformance, span, spec
from tether.types import AttemptStatus, RolloutStatus


class _ServedStore(StoreConformance):
    """Runs the conformance suite against an HttpStore whose server is backed by ``backend``."""

    server: StoreServer
    backend: Store

    async def make_backend(self, tmp_path: Path) -> Store:
        raise NotImplementedError

    async def make_store(self, tmp_path: Path) -> Store:
        self.backend = await self.make_backend(tmp_path)
        self.server = await start_server(self.backend)
        return HttpStore(self.server.url)

    async def close_store(self, store: Store) -> None:
        await store.close()
        await self.server.stop()
        await self.backend.close()


class TestHttpOverMemory(_ServedStore):
    async def make_backend(self, tmp_path: Path) -> Store:
        return MemoryStore()


class TestHttpOverSqlite(_ServedStore):
    async def make_backend(self, tmp_path: Path) -> Store:
        return SqliteStore(tmp_path / "store.db")


# -- HTTP-only behaviour --------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A server on 127.0.0.1 and the store behind it (which tests use to check what really got stored)."""
    backend: Store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "served.db")
    async with await start_server(backend) as server:
        yield backend, server
    await backend.close()


async def _raw(
    server: StoreServer, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}  # as HttpStore sends (a write needs it)
    async with aiohttp.ClientSession() as session:
        async with session.request(method, server.url + path, data=body, headers=sent) as resp:
            return resp.status, _json.loads(await resp.read())


async def test_32_concurrent_writers_lose_no_span(served: tuple[Store, StoreServer]) -> None:
    _, server = served
    shared = HttpStore(server.url)
    await shared.enqueue([spec(i) for i in range(8)])
    attempts = [a for _, a in await shared.dequeue("w", limit=8)]
    writers, per_writer, batch = 32, 320, 40  # 10,240 spans in 256 requests

    async def writer(w: int) -> list[tuple[str, int, int, int]]:
        client = shared if w % 2 else HttpStore(server.url)  # half share one pool, half bring their own
        attempt = attempts[w % len(attempts)]
        sent = []
        try:
            for start in range(0, per_writer, batch):
                spans = [
                    span(
                        attempt.rollout_id,
                        attempt.attempt_id,
                        f"w{w}-{i}",
                        attributes={"writer": w, "i": i, "prompt_token_ids": list(range(64))},
                    )
                    for i in range(start, start + batch)
                ]
                sequences = await client.add_spans(spans)
                sent += [
                    (attempt.attempt_id, w, i, seq)
                    for i, seq in zip(range(start, start + batch), sequences, strict=True)
                ]
        finally:
            if client is not shared:
                await client.close()
        return sent

    results = await asyncio.gather(*(writer(w) for w in range(writers)))
    sent = {(aid, w, i): seq for got in results for aid, w, i, seq in got}
    assert len(sent) == writers * per_writer >= 10_000

    total = 0
    for attempt in attempts:
        stored = await shared.get_spans(attempt.attempt_id)
        total += len(stored)
        assert [s.sequence for s in stored] == list(range(len(stored)))  # contiguous, in order
        for s in stored:
            key = (attempt.attempt_id, s.attributes["writer"], s.attributes["i"])
            assert sent.pop(key) == s.sequence  # each span stored once, under the number it was given
    assert total == writers * per_writer and not sent
    await shared.close()


async def test_token_is_required_when_set() -> None:
    backend = MemoryStore()
    async with await start_server(backend, token="s3cret") as server:
        for token in (None, "wrong"):
            client = HttpStore(server.url, token=token or "")
            with pytest.raises(StoreUnauthorized, match="TETHER_STORE_TOKEN"):
                await client.enqueue([spec(1)])
            await client.close()
        assert await backend.list_rollouts() == []  # refused requests changed nothing

        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, body = await _raw(server, "GET", "/v1/health", headers=headers)
            assert status == 401 and body["error"]["type"] == "Unauthorized"

        client = HttpStore(server.url, token="s3cret")
        (rollout,) = await client.enqueue([spec(1)])
        assert (await backend.get_rollout(rollout.rollout_id)).status == RolloutStatus.QUEUED
        await client.close()


async def test_token_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE_TOKEN", "from-env")
    async with await start_server(MemoryStore(), token="from-env") as server:
        client = open_store(server.url)
        assert isinstance(client, HttpStore)
        assert await client.list_rollouts() == []
        await client.close()


_MALFORMED = [
    ("POST", "/v1/spans", b"{not json", "not valid JSON"),
    ("POST", "/v1/spans", b"[1, 2]", "must be a JSON object"),
    ("POST", "/v1/spans", b'{"spans": "x"}', "'spans' must be an array"),
    ("POST", "/v1/spans", b'{"spans": [{"rollout_id": "r", "kind": "llm", "name": "n"}]}', "'attempt_id'"),
    (
        "POST",
        "/v1/spans",
        b'{"spans": [{"rollout_id": 1, "attempt_id": "a", "kind": "llm", "name": "n"}]}',
        "string",
    ),
    ("POST", "/v1/rollouts", b'{"specs": [{"input": 1, "max_attempts": "3"}]}', "'max_attempts'"),
    ("POST", "/v1/rollouts", b'{"specs": [{"metadata": {}}]}', "'input'"),
    ("POST", "/v1/rollouts", b"", "'specs' must be an array"),
    ("POST", "/v1/dequeue", b'{"limit": 1}', "'worker_id'"),
    ("POST", "/v1/rollouts/list", b'{"status": "sleeping"}', "status must be one of"),
    ("POST", "/v1/resources", b'{"llm": {"model": "m"}}', "'base_url'"),
    ("GET", "/v1/resources/latest", None, "integer"),
    ("GET", "/v1/resources/" + "9" * 31, None, "version must be between"),
    ("GET", "/v1/attempts/at-x/spans?since=" + "9" * 31, None, "since must be between"),
    ("GET", "/v1/attempts/at-x/spans?since=-" + "9" * 31, None, "since must be between"),
    ("POST", "/v1/rollouts/list", b'{"limit": -1}', "limit"),
    ("POST", "/v1/rollouts/list", b'{"limit": 18446744073709551615}', "limit"),
    ("POST", "/v1/dequeue", b'{"worker_id": "w", "limit": 18446744073709551615}', "limit"),
    ("POST", "/v1/rollouts", b'{"specs": [{"input": 1, "max_attempts": 18446744073709551615}]}', "max_attempts"),
]


@pytest.mark.parametrize(("method", "path", "body", "message"), _MALFORMED)
async def test_malformed_requests_get_400_and_change_nothing(
    served: tuple[Store, StoreServer], method: str, path: str, body: bytes | None, message: str
) -> None:
    backend, server = served
    await backend.enqueue([spec(1), spec(2)])
    ((rollout, attempt),) = await backend.dequeue("w")
    await backend.add_spans([span(rollout.rollout_id, attempt.attempt_id)])
    before = [r.to_dict() for r in await backend.list_rollouts()]

    status, reply = await _raw(server, method, path, body)
    assert status == 400
    assert reply["error"]["type"] == "InvalidInput" and message in reply["error"]["message"]
    assert [r.to_dict() for r in await backend.list_rollouts()] == before
    assert len(await backend.get_spans(attempt.attempt_id)) == 1
    assert (await backend.get_resources()) is None


async def test_a_batch_with_one_malformed_span_stores_none(served: tuple[Store, StoreServer]) -> None:
    backend, server = served
    await backend.enqueue([spec(1)])
    ((rollout, attempt),) = await backend.dequeue("w")
    good = span(rollout.rollout_id, attempt.attempt_id).to_dict()
    bad = {**good, "start_time": "yesterday"}
    status, reply = await _raw(server, "POST", "/v1/spans", _json.dumps({"spans": [good, good, bad]}))
    assert status == 400 and "span #2" in reply["error"]["message"] and "start_time" in reply["error"]["message"]
    assert await backend.get_spans(attempt.attempt_id) == []


async def test_errors_keep_their_class_and_message(served: tuple[Store, StoreServer]) -> None:
    backend, server = served
    client = HttpStore(server.url)
    with pytest.raises(NotFound) as remote:
        await client.get_rollout("ro-a/b c?")  # ids with URL characters are quoted, not mangled
    with pytest.raises(NotFound) as local:
        await backend.get_rollout("ro-a/b c?")
    assert str(remote.value) == str(local.value)
    status, reply = await _raw(server, "GET", "/v1/nowhere")
    assert status == 404 and reply["error"]["type"] == "HTTPError"
    await client.enqueue([spec(1)])
    ((_, attempt),) = await client.dequeue("w")
    with pytest.raises(InvalidInput, match="rollout output"):
        await client.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, output={1, 2})
    assert (await backend.get_attempts(attempt.rollout_id))[0].status == AttemptStatus.RUNNING
    await client.close()


async def test_refuses_non_loopback_without_token() -> None:
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.org"):
        with pytest.raises(ValueError, match="--token") as info:
            await start_server(MemoryStore(), host=host)
        assert "TETHER_STORE_TOKEN" in str(info.value)
        with pytest.raises(ValueError, match="--token"):
            serve("memory:", host=host, port=0)
    for host in ("127.0.0.1", "localhost"):
        async with await start_server(MemoryStore(), host=host) as server:
            assert server.port > 0
    async with await start_server(MemoryStore(), host="0.0.0.0", token="t") as server:
        client = HttpStore(f"http://127.0.0.1:{server.port}", token="t")
        assert (await client.health())["ok"] is True
        await client.close()


async def test_unreachable_server_says_how_to_start_one() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = HttpStore(f"http://127.0.0.1:{port}")
    with pytest.raises(StoreUnavailable) as info:
        await client.list_rollouts()
    assert isinstance(info.value, ConnectionError)
    assert f"no tether store at http://127.0.0.1:{port}" in str(info.value)
    assert "tether store serve" in str(info.value)
    await client.close()


async def test_closed_client_is_refused(served: tuple[Store, StoreServer]) -> None:
    _, server = served
    client = HttpStore(server.url + "/")
    assert client.url == server.url
    await client.list_rollouts()
    await client.close()
    with pytest.raises(Exception, match="closed"):
        await client.list_rollouts()


def test_bad_url() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        HttpStore("localhost:4747")


async def test_stopping_the_server_ends_a_pending_wait() -> None:
    server = await start_server(MemoryStore())
    client = HttpStore(server.url)
    (rollout,) = await client.enqueue([spec(1)])
    waiting = asyncio.create_task(client.wait_for_rollouts([rollout.rollout_id]))  # no timeout: would poll forever
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await server.stop()
    with pytest.raises(StoreUnavailable, match="stopping"):
        await waiting
    with pytest.raises(StoreUnavailable, match="no tether store"):
        await client.get_rollout(rollout.rollout_id)
    await client.close()


async def test_port_in_use_is_named() -> None:
    async with await start_server(MemoryStore()) as first:
        with pytest.raises(OSError, match=f"127.0.0.1:{first.port}.*pick another --port"):
            await start_server(MemoryStore(), port=first.port)


async def test_a_non_ascii_token_works_and_bad_header_bytes_get_401() -> None:
    token = "pässwörd-密码"
    backend = MemoryStore()
    async with await start_server(backend, token=token) as server:
        client = HttpStore(server.url, token=token)  # sent as UTF-8, as the server compares it
        (rollout,) = await client.enqueue([spec(1)])
        assert (await backend.get_rollout(rollout.rollout_id)).status == RolloutStatus.QUEUED
        await client.close()
        wrong = HttpStore(server.url, token="passwörd")
        with pytest.raises(StoreUnauthorized):
            await wrong.list_rollouts()
        await wrong.close()

        for header in (b"Bearer \xff\xfe\xc3(", "Bearer pässwörd-密码".encode("latin-1", "replace")):
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(
                b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "
                + header
                + b"\r\n\r\n"
            )
            status_line = await reader.readline()
            body = await reader.read()
            writer.close()
            assert status_line.split()[1] == b"401", (header, status_line, body)
            assert b'"Unauthorized"' in body


async def test_the_body_cap_is_an_option_and_answers_413(tmp_path: Path) -> None:
    backend = SqliteStore(tmp_path / "s.db")
    async with await start_server(backend, max_body_bytes=64 * 1024) as server:
        client = HttpStore(server.url)
        (rollout,) = await client.enqueue([spec(1)])
        ((_, attempt),) = await client.dequeue("w")
        small = [span(rollout.rollout_id, attempt.attempt_id, f"s{i}", attributes={"ids": list(range(1000))})
                 for i in range(3)]  # fmt: skip
        assert await client.add_spans(small) == [0, 1, 2]
        big = span(rollout.rollout_id, attempt.attempt_id, "big", attributes={"text": "x" * 100_000})
        with pytest.raises(InvalidInput, match=r"over this server's limit of 65536 bytes.*--max-body-mb"):
            await client.add_spans([big])
        assert [s.name for s in await backend.get_spans(attempt.attempt_id)] == ["s0", "s1", "s2"]
        assert await client.add_spans(small[:1]) == [3]  # the client (and its connection) is still fine
        status, reply = await _raw(server, "POST", "/v1/spans", b"{" + b" " * 70_000 + b"}")
        assert status == 413 and reply["error"]["type"] == "InvalidInput"

        batcher = SpanBatcher(client, max_delay_s=10)  # a batch over the cap is written in pieces that fit
        await batcher.start()
        for i in range(3):
            batcher.submit(span(rollout.rollout_id, attempt.attempt_id, f"m{i}", attributes={"t": "y" * 30_000}))
        await batcher.close()
        assert (batcher.written, batcher.dropped) == (3, 0)
        assert [s.name for s in await backend.get_spans(attempt.attempt_id, since=4)] == ["m0", "m1", "m2"]
        await client.close()
    await backend.close()


def test_the_default_body_cap() -> None:
    from tether.store.http.server import DEFAULT_MAX_BODY_BYTES

    assert DEFAULT_MAX_BODY_BYTES == 32 * 1024 * 1024
