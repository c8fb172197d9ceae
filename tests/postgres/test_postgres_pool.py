"""The PostgreSQL store's connection pool (``tether.store.postgres._pool``) on a real server: which connection a
call gets, how the pool grows, and what it does with connections that broke or were abandoned."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.store import StoreError
from tether.store.postgres import PostgresStore
from tether.testing.store_conformance import span, spec

_PID = "SELECT pg_backend_pid()"


async def _pid(store: PostgresStore, sql: str = _PID) -> int:
    rows = await store._db.fetch(sql)
    return int(rows[0][-1])


async def test_calls_one_after_another_reuse_one_connection(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=10)
    try:
        pids = {await _pid(store) for _ in range(30)}
        assert len(pids) == 1  # one connection, its prepared statements warm
        assert (await store._db.pool()).size == 1
    finally:
        await store.close()


async def test_a_new_connection_comes_ready_with_the_stores_statements(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2)
    try:
        slow = asyncio.create_task(_pid(store, "SELECT pg_sleep(0.5), pg_backend_pid()"))
        await asyncio.sleep(0.1)  # the first connection is busy: the pool opens a second in the background
        prepared = await store._db.fetch("SELECT count(*) FROM pg_prepared_statements")
        assert prepared[0][0] >= 6  # the lifecycle's and the span reads' statements, prepared before any use
        await slow
    finally:
        await store.close()


async def test_concurrent_calls_grow_the_pool_to_its_size_and_no_further(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=3)
    try:
        await store.count_rollouts()
        pids = await asyncio.gather(*(_pid(store, "SELECT pg_sleep(0.05), pg_backend_pid()") for _ in range(16)))
        assert 1 < len(set(pids)) <= 3
        assert (await store._db.pool()).size <= 3
        (rollout,) = await store.enqueue([spec(1)])  # and the store works on whichever connection it gets
        ((_, attempt),) = await store.dequeue("w")
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "s")])
        assert [s.name for s in await store.get_spans(attempt.attempt_id)] == ["s"]
    finally:
        await store.close()


async def test_a_connection_the_server_ended_is_replaced(pg_url: str) -> None:
    store, admin = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        pid = await _pid(store)
        await admin._db.fetch("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.2)  # the end of the connection reaches the client
        assert await _pid(store) != pid  # not an error: the closed connection was not handed out
        assert (await store._db.pool()).size == 1
    finally:
        await store.close()
        await admin.close()


async def test_a_cancelled_call_leaves_no_busy_connection_behind(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    try:
        pid = await _pid(store)
        task = asyncio.create_task(store._db.fetch("SELECT pg_sleep(30)"))
        waiting = asyncio.create_task(_pid(store))  # waits for the only connection, then is cancelled too
        await asyncio.sleep(0.2)
        task.cancel()
        waiting.cancel()
        for cancelled in (task, waiting):
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        start = time.monotonic()
        assert await _pid(store) != pid  # the cancelled call's connection was dropped, not reused mid-query
        assert time.monotonic() - start < 5  # and nothing waits for the 30 s sleep
        assert (await store._db.pool()).size == 1
    finally:
        await store.close()


async def test_a_closed_store_refuses_calls_and_frees_its_waiters(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.count_rollouts()  # the pool made first (on a busy machine its making outlasted the sleep below)
    busy = asyncio.create_task(store._db.fetch("SELECT pg_sleep(1)"))
    await asyncio.sleep(0.1)
    waiting = asyncio.create_task(store.count_rollouts())
    await asyncio.sleep(0.05)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await waiting
    assert len(await busy) == 1  # a call already running finishes; its connection is closed when it comes back
    with pytest.raises(StoreError, match="closed"):
        await store.count_rollouts()
