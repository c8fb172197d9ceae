"""Issue 26's fault suite: kill, stop and flood tether's servers on 127.0.0.1 and check that nothing
acknowledged is lost, nothing is stored twice, and every bad input gets a 4xx.

- the store server with its trace receiver (``tether store serve`` on SQLite, a real process): exporters
  post traces while it is killed (SIGKILL) and frozen (SIGSTOP) and restarted; like OTLP exporters they resend
  what was not answered 200 (and, as after a lost answer, some of what was). Every trace answered 200 is in the
  file afterwards, each span exactly once, one rollout per trace.
- the store server flooded with malformed OTLP and with what web pages can send: all 4xx, nothing stored.
- the model server stopped under a proxy: calls get 502 and are on record as failed calls, never a hang.

Bounded: a few hundred requests and under a minute per test, all to loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tether import spans
from tether.capture.span_batcher import SpanBatcher
from tether.models.http_backend import BackendServer, HttpBackend
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, text
from tether.types import RolloutSpec

TRACES, SPANS_PER_TRACE, PARTS = 60, 6, 3  # each trace sent in PARTS requests: children first, root last


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StoreProcess:
    """``tether store serve`` on a SQLite file, as a process this test can kill, stop and restart."""

    def __init__(self, db: Path) -> None:
        self.db, self.port = db, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        code = "from tether.cli import main; main()"
        args = ["store", "serve", "--store", f"sqlite:///{self.db}", "--port", str(self.port)]
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the store server did not start")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def store_process(tmp_path: Path) -> Iterator[StoreProcess]:
    served = StoreProcess(tmp_path / "faults.db")
    served.start()
    yield served
    served.stop()


def _span(trace: int, i: int) -> dict[str, Any]:
    span = {
        "traceId": f"{trace + 1:032x}",
        "spanId": f"{i + 1:016x}",
        "name": "chat m",
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + i),
        "endTimeUnixNano": str(1_700_000_000_000_000_500 + i),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {
                "key": "gen_ai.input.messages",
                "value": {
                    "stringValue": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": f"t{trace}"}]}]
                    )
                },
            },
        ],
    }
    if i > 0:
        span["parentSpanId"] = f"{1:016x}"
    return span


def _requests() -> list[tuple[int, bytes]]:
    """(trace, body) for every part of every trace, children before their root."""
    out = []
    for t in range(TRACES):
        spans_ = [_span(t, i) for i in range(SPANS_PER_TRACE)]
        parts = [spans_[1:][k :: PARTS - 1] for k in range(PARTS - 1)] + [spans_[:1]]
        for part in parts:
            body = {"resourceSpans": [{"scopeSpans": [{"spans": part}]}]}
            out.append((t, json.dumps(body).encode()))
    return out


async def _post(http: aiohttp.ClientSession, url: str, body: bytes) -> int | None:
    try:
        async with http.post(url + "/v1/traces", data=body, headers={"Content-Type": "application/json"}) as r:
            await r.read()
            return r.status
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


async def test_traces_survive_kills_and_stops_of_the_store_server(store_process: StoreProcess) -> None:
    rng = random.Random(26)
    pending = _requests()
    acknowledged: set[int] = set()  # indexes into the request list answered 200
    unanswered = 0  # requests the faults cut (no answer, or 503)
    timeout = aiohttp.ClientTimeout(total=2)
    faults = [signal.SIGKILL, signal.SIGSTOP, signal.SIGKILL, signal.SIGSTOP]
    async with aiohttp.ClientSession(timeout=timeout) as http:
        todo = list(range(len(pending)))
        rounds = 0
        while todo and rounds < 20:
            rounds += 1
            fault_at = rng.randrange(len(todo)) if faults else -1
            sent = []
            for n, index in enumerate(todo):
                if n == fault_at:
                    sig = faults.pop(0)
                    store_process.signal(sig)
                    if sig == signal.SIGSTOP:  # frozen for a while: requests time out, then it wakes up
                        await asyncio.sleep(0.5)
                        asyncio.get_running_loop().call_later(2.5, store_process.signal, signal.SIGCONT)
                status = await _post(http, store_process.url, pending[index][1])
                if status == 200:
                    acknowledged.add(index)
                    if rng.random() < 0.1:  # the exporter lost the answer and sends it again
                        sent.append(index)
                else:
                    assert status in (None, 503), status  # never a 4xx or 500 for a good request
                    unanswered += 1
                    sent.append(index)
                if store_process.proc is not None and store_process.proc.poll() is not None:
                    store_process.start()  # the supervisor restarts it
            todo = [i for i in sent if i not in acknowledged or rng.random() < 0.5]
            await asyncio.sleep(3.0 if rounds == 1 else 0.2)
        assert not [i for i in todo if i not in acknowledged], "some requests were never answered 200"
    assert len(acknowledged) == len(pending) and unanswered > 0 and not faults  # the faults did bite
    store_process.stop()
    store = open_store(f"sqlite:///{store_process.db}")
    try:
        rollouts = await store.list_rollouts()
        assert len(rollouts) == TRACES  # one per trace, retries and parts included
        for rollout in rollouts:
            (attempt,) = await store.get_attempts(rollout.rollout_id)
            got = [s.span_id for s in await store.get_spans(attempt.attempt_id)]
            assert sorted(got) == [f"{i + 1:016x}" for i in range(SPANS_PER_TRACE)], rollout.rollout_id
            assert rollout.status.finished and rollout.metadata[spans.IMPORTED]["source"] == "otlp"
        assert await store.list_rollouts(status=None, limit=None) == rollouts
    finally:
        await store.close()


BAD_BODIES = [
    (b'{"resourceSpans": [1]}', "application/json"),
    (b'{"resourceSpans": [{"scopeSpans": "x"}]}', "application/json"),
    (b"\xff\xfe\x00", "application/json"),
    (b"inf inf", "application/x-protobuf"),
    (b'{"resourceSpans": []}', "text/plain"),
    (
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{**_span(0, 0), "spanId": "zz"}]}]}]}).encode(),
        "application/json",
    ),
    (
        json.dumps(
            {"resourceSpans": [{"scopeSpans": [{"spans": [{**_span(0, 0), "startTimeUnixNano": "abc"}]}]}]}
        ).encode(),
        "application/json",
    ),
]


async def test_a_flood_of_bad_input_gets_4xx_and_stores_nothing(store_process: StoreProcess) -> None:
    async with aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(20):
            for body, content_type in BAD_BODIES:
                async with http.post(
                    store_process.url + "/v1/traces", data=body, headers={"Content-Type": content_type}
                ) as r:
                    statuses.append(r.status)
            for headers in (
                {"Content-Type": "text/plain"},
                {"Content-Type": "application/json", "Host": "evil.example"},
            ):
                async with http.post(
                    store_process.url + "/v1/rollouts", data=b'{"specs": [{"input": 1}]}', headers=headers
                ) as r:
                    statuses.append(r.status)
        assert all(400 <= s < 500 for s in statuses), sorted(set(statuses))
        async with http.get(store_process.url + "/v1/health") as r:
            assert r.status == 200
    store_process.stop()
    store = open_store(f"sqlite:///{store_process.db}")
    try:
        assert await store.list_rollouts() == []
    finally:
        await store.close()


async def test_a_stopped_model_server_fails_calls_on_record_and_a_restarted_one_serves_again() -> None:
    store = open_store("memory:")
    (rollout,) = await store.enqueue([RolloutSpec(input="x")])
    ((_, attempt),) = await store.dequeue("w")
    async with FakeLLM(handler=lambda request: text("ok")) as llm:
        upstream = RemoteBackend(llm.base_url)
        port = _free_port()
        model_server = await BackendServer(upstream, port=port, token="t").start()
        backend = HttpBackend(model_server.url, token="t", timeout_s=5)
        async with (
            SpanBatcher(store) as batcher,
            ProxyServer(backend, batcher=batcher, close_backend=True) as proxy,
            proxy.attempt(rollout.rollout_id, attempt.attempt_id) as url,
            aiohttp.ClientSession() as http,
        ):
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(url + "/chat/completions", json=body) as r:
                assert r.status == 200
            await model_server.stop()
            for _ in range(5):
                async with http.post(url + "/chat/completions", json=body) as r:
                    assert r.status == 502
            model_server = await BackendServer(upstream, port=port, token="t").start()
            async with http.post(url + "/chat/completions", json=body) as r:
                assert r.status == 200
            await batcher.flush()
        await model_server.stop()
        await upstream.close()
    names = [s.name for s in await store.get_spans(attempt.attempt_id)]
    assert names.count(spans.LLM_CALL) == 2 and names.count(spans.LLM_CALL_FAILED) == 5
