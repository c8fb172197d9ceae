"""Issue 26 item 3: a short store outage does not throw finished work away.

A real ``tether store serve`` process (SQLite) is killed and restarted a few seconds later while a
``SpanBatcher`` writes spans and a ``Runner`` ends attempts through ``HttpStore``; and a relay in front of it
loses the answers to span batches the server did commit. Every span is stored exactly once and every finished
rollout ends with its own outcome."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from test_faults import StoreProcess

from tether.capture.span_batcher import SpanBatcher
from tether.store import open_store
from tether.store.retry import retry_outage
from tether.types import AttemptStatus, RolloutSpec, Span, SpanKind


def _spans(rollout_id: str, attempt_id: str, start: int, n: int) -> list[Span]:
    return [
        Span(rollout_id, attempt_id, SpanKind.OTHER, "step", attributes={"i": i}, span_id=f"sp-{i}")
        for i in range(start, start + n)
    ]


async def test_spans_and_outcomes_ride_out_a_killed_and_restarted_store_server(tmp_path: Path) -> None:
    served = StoreProcess(tmp_path / "outage.db")
    served.start()
    store = open_store(served.url)
    try:
        await store.enqueue([RolloutSpec(input=i) for i in range(4)])
        claimed = await store.dequeue("w", limit=4)
        batcher = SpanBatcher(store, max_batch=20, max_delay_s=0.01, retry_delay_s=0.1)
        await batcher.start()
        rollout, attempt = claimed[0]
        for span in _spans(rollout.rollout_id, attempt.attempt_id, 0, 100):
            batcher.submit(span)
        await batcher.flush()
        served.signal(signal.SIGKILL)  # down for 4 s, as a store server restarted by its supervisor
        asyncio.get_running_loop().call_later(4.0, served.start)
        for span in _spans(rollout.rollout_id, attempt.attempt_id, 100, 100):
            batcher.submit(span)
        ended = [
            retry_outage(
                lambda a=a: store.finish_attempt(a.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0), "end"
            )
            for _, a in claimed[1:]
        ]
        await asyncio.gather(batcher.flush(), *ended)
        await batcher.close()
        assert batcher.dropped == 0
        got = [s.span_id for s in await store.get_spans(attempt.attempt_id)]
        assert sorted(got) == sorted(f"sp-{i}" for i in range(200)) and len(got) == 200
        for r, _ in claimed[1:]:
            assert (await store.get_rollout(r.rollout_id)).reward == 1.0
    finally:
        await store.close()
        served.stop()


class LosingRelay:
    """Forwards HTTP/1.1 requests to ``upstream``; for the first ``lose`` POSTs to ``/v1/spans`` it lets the
    server answer (and commit) but closes the client's connection instead of passing the answer on."""

    def __init__(self, upstream_port: int, lose: int) -> None:
        self.upstream_port, self.lose = upstream_port, lose
        self.server: asyncio.Server | None = None

    async def _read_message(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return head + (await reader.readexactly(length) if length else b"")

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            while True:
                request = await self._read_message(client_r)
                up_w.write(request)
                await up_w.drain()
                answer = await self._read_message(up_r)
                if request.startswith(b"POST /v1/spans ") and self.lose > 0:
                    self.lose -= 1
                    return  # committed upstream; the client never hears of it
                client_w.write(answer)
                await client_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            client_w.close()
            up_w.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


async def test_a_batch_whose_answer_was_lost_is_not_stored_twice(tmp_path: Path) -> None:
    served = StoreProcess(tmp_path / "lost.db")
    served.start()
    relay = LosingRelay(served.port, lose=3)
    store = open_store(await relay.start())
    try:
        (rollout,) = await store.enqueue([RolloutSpec(input="x")])
        ((_, attempt),) = await store.dequeue("w")
        async with SpanBatcher(store, max_batch=10, max_delay_s=0.01, retry_delay_s=0.05) as batcher:
            for span in _spans(rollout.rollout_id, attempt.attempt_id, 0, 50):
                batcher.submit(span)
        assert relay.lose == 0 and batcher.dropped == 0 and batcher.written == 50
        got = [s.span_id for s in await store.get_spans(attempt.attempt_id)]
        assert sorted(got) == sorted(f"sp-{i}" for i in range(50)) and len(got) == 50
    finally:
        await store.close()
        served.stop()
