"""SpanBatcher against the real memory store: batching, ordering, bad spans, retries, shutdown."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence

import pytest

from tether.capture.span_batcher import SpanBatcher
from tether.store.memory import MemoryStore
from tether.types import Attempt, RolloutSpec, Span, SpanKind


async def _attempts(store: MemoryStore, n: int) -> list[Attempt]:
    await store.enqueue([RolloutSpec(input=i) for i in range(n)])
    return [a for _, a in await store.dequeue("w", limit=n)]


def _span(attempt: Attempt, i: int, **attrs: object) -> Span:
    return Span(attempt.rollout_id, attempt.attempt_id, SpanKind.OTHER, f"s{i}", attributes={"i": i, **attrs})


async def _until(predicate: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_close_writes_everything_in_order_per_attempt() -> None:
    store = MemoryStore()
    attempts = await _attempts(store, 5)
    batcher = SpanBatcher(store, max_batch=7, max_delay_s=10)
    for i in range(100):
        batcher.submit(_span(attempts[i % 5], i))
    assert batcher.pending == 100  # submit returned without writing
    await batcher.close()
    assert batcher.written == 100 and batcher.dropped == 0
    for k, attempt in enumerate(attempts):
        spans = await store.get_spans(attempt.attempt_id)
        assert [s.attributes["i"] for s in spans] == list(range(k, 100, 5))
        assert [s.sequence for s in spans] == list(range(20))
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(_span(attempts[0], 0))
    await batcher.close()  # idempotent


async def test_background_writer_flushes_after_delay_and_when_full() -> None:
    store = MemoryStore()
    (attempt,) = await _attempts(store, 1)
    async with SpanBatcher(store, max_batch=1000, max_delay_s=0.01) as batcher:
        batcher.submit(_span(attempt, 0))
        await _until(lambda: batcher.written == 1)
        assert len(await store.get_spans(attempt.attempt_id)) == 1

    async with SpanBatcher(store, max_batch=10, max_delay_s=3600) as batcher:
        for i in range(10):
            batcher.submit(_span(attempt, i))
        await _until(lambda: batcher.written == 10)  # a full batch does not wait for the delay
        batcher.submit(_span(attempt, 10))
        await batcher.flush()
        assert batcher.written == 11 and batcher.pending == 0


async def test_bad_span_is_dropped_alone(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    (attempt,) = await _attempts(store, 1)
    batcher = SpanBatcher(store, max_batch=100, max_delay_s=10)
    batcher.submit(_span(attempt, 0))
    batcher.submit(Span(attempt.rollout_id, "at-unknown", SpanKind.OTHER, "bad"))
    batcher.submit(_span(attempt, 1, payload=object()))  # not JSON-serialisable
    batcher.submit(_span(attempt, 2))
    with caplog.at_level(logging.ERROR, logger="tether.capture.span_batcher"):
        await batcher.close()
    assert [s.attributes["i"] for s in await store.get_spans(attempt.attempt_id)] == [0, 2]
    assert batcher.written == 2 and batcher.dropped == 2
    assert "at-unknown" in caplog.text and "not JSON-serialisable" in caplog.text


class _FlakyStore(MemoryStore):
    """A memory store whose first ``failures`` span writes fail as if the connection dropped."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store went away")
        return await super().add_spans(spans)


async def test_transient_store_failure_is_retried() -> None:
    store = _FlakyStore(failures=2)
    (attempt,) = await _attempts(store, 1)
    batcher = SpanBatcher(store, max_delay_s=0, retry_delay_s=0.001)
    for i in range(5):
        batcher.submit(_span(attempt, i))
    await batcher.close()
    assert [s.attributes["i"] for s in await store.get_spans(attempt.attempt_id)] == list(range(5))
    assert batcher.dropped == 0

    store = _FlakyStore(failures=100)
    (attempt,) = await _attempts(store, 1)
    batcher = SpanBatcher(store, retries=1, retry_delay_s=0.001)
    batcher.submit(_span(attempt, 0))
    await batcher.close()
    assert batcher.dropped == 1 and batcher.written == 0


async def test_submit_from_other_threads() -> None:
    store = MemoryStore()
    attempts = await _attempts(store, 4)
    batcher = SpanBatcher(store, max_batch=16, max_delay_s=0.001)
    await batcher.start()

    def worker(attempt: Attempt) -> None:
        for i in range(50):
            batcher.submit(_span(attempt, i))

    threads = [threading.Thread(target=worker, args=(a,)) for a in attempts]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        await asyncio.sleep(0.005)
    await asyncio.sleep(0)  # let the threadsafe callbacks run
    await batcher.close()
    for attempt in attempts:
        assert [s.attributes["i"] for s in await store.get_spans(attempt.attempt_id)] == list(range(50))


def test_unbound_batcher_from_a_thread_names_the_fix() -> None:
    batcher = SpanBatcher(MemoryStore())
    with pytest.raises(RuntimeError, match=r"batcher\.start\(\)"):
        batcher.submit(Span("ro-x", "at-x", SpanKind.OTHER, "s"))
    with pytest.raises(ValueError, match="max_batch"):
        SpanBatcher(MemoryStore(), max_batch=0)


async def test_deferred_spans_are_built_at_write_time_in_submission_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    (attempt,) = await _attempts(store, 1)
    built: list[int] = []

    def build(i: int) -> Span:
        built.append(i)
        if i == 3:
            raise ValueError("a bad record")
        return _span(attempt, i)

    batcher = SpanBatcher(store, max_batch=4, max_delay_s=3600)
    for i in range(6):
        if i % 2:
            batcher.submit(_span(attempt, i))
        else:
            batcher.submit_deferred(lambda i=i: build(i))  # type: ignore[misc]
    batcher.submit_deferred(lambda: build(3))
    assert built == [] and batcher.pending == 7  # nothing built on the submitter's path
    with caplog.at_level(logging.ERROR):
        await batcher.close()
    assert built == [0, 2, 4, 3]
    spans = await store.get_spans(attempt.attempt_id)
    assert [s.attributes["i"] for s in spans] == [0, 1, 2, 3, 4, 5]  # the failed build dropped alone
    assert batcher.written == 6 and batcher.dropped == 1
    assert "building it raised" in caplog.text


async def test_quiet_s_writes_once_submissions_pause_not_after_max_delay() -> None:
    store = MemoryStore()
    (attempt,) = await _attempts(store, 1)
    async with SpanBatcher(store, max_batch=1000, max_delay_s=3600, quiet_s=0.5) as batcher:
        for i in range(5):  # a burst: each submit within quiet_s of the last keeps the batch open
            batcher.submit(_span(attempt, i))
            await asyncio.sleep(0.005)
        assert batcher.written == 0
        await _until(lambda: batcher.written == 5, timeout=5.0)  # one write, once the burst is over
        assert [s.attributes["i"] for s in await store.get_spans(attempt.attempt_id)] == list(range(5))
    async with SpanBatcher(store, max_batch=1000, max_delay_s=0.05, quiet_s=3600) as batcher:
        started = asyncio.get_running_loop().time()
        while batcher.written == 0:  # never quiet: max_delay_s still bounds the wait
            batcher.submit(_span(attempt, 9))
            await asyncio.sleep(0.002)
            assert asyncio.get_running_loop().time() - started < 5.0
    with pytest.raises(ValueError, match="quiet_s"):
        SpanBatcher(store, quiet_s=0)
