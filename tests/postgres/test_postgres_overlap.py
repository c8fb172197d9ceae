"""A statement and local work at once (``Connections.fetch_during``, ``tether.store.postgres._overlap``): the
statement is on the server before the work runs, a call cut short (cancelled, or its work failing) drops its
connection rather than handing it on mid-query, and cached reads in either order read what the database holds."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.store import StoreError
from tether.store.errors import NotFound
from tether.store.postgres import PostgresStore
from tether.testing.pg_server import TempPostgres
from tether.testing.store_conformance import span, spec
from tether.types import AttemptStatus

_PID = "SELECT pg_backend_pid()"
_SLEEP = "SELECT pg_sleep($1), 'tether overlap test'"


async def _pid(store: PostgresStore) -> int:
    return int((await store._db.fetch(_PID))[0][0])


def _cancel_running(pg: TempPostgres, database: str) -> str:
    """From another client (psql): cancel the test's statement once the server runs it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = pg.psql(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE state = 'active' "
            f"AND query = '{_SLEEP.replace(chr(39), chr(39) * 2)}'",
            database,
        ).strip()
        if out:
            return out
        time.sleep(0.05)
    raise AssertionError("the statement never reached the server")


async def test_the_statement_runs_on_the_server_while_the_work_runs(pg_server: TempPostgres, pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    database = pg_url.rsplit("/", 1)[1]
    try:
        pid = await _pid(store)
        await store._db.fetch(_SLEEP, 0)  # prepared (a first call's first wait is the prepare's round trip)
        # the work finds the statement running on the server (sent before the work began) and cancels it; a
        # call that sent it only after its work would wait out the whole minute
        with pytest.raises(StoreError, match="cancel"):
            await store._db.fetch_during(_SLEEP, (60,), lambda: _cancel_running(pg_server, database))
        assert await _pid(store) == pid  # the server refused the statement: the connection is still good
        rows, done = await store._db.fetch_during("SELECT $1::int + 1", (41,), lambda: "work")
        assert (rows[0][0], done) == (42, "work")
    finally:
        await store.close()


async def test_failing_work_raises_as_it_is_and_drops_the_connection(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    try:
        pid = await _pid(store)

        def work() -> None:
            raise ValueError("the work failed")

        with pytest.raises(ValueError, match="the work failed"):
            await store._db.fetch_during("SELECT pg_sleep(0.2)", (), work)
        assert await _pid(store) != pid  # its answer was never read: not handed to the next call
        assert (await store._db.pool()).size == 1
    finally:
        await store.close()


async def test_a_cancelled_call_leaves_no_busy_connection_behind(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    try:
        pid = await _pid(store)
        task = asyncio.create_task(store._db.fetch_during(_SLEEP, (60,), lambda: None))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        start = time.monotonic()
        assert await _pid(store) != pid  # dropped, not reused mid-query
        assert time.monotonic() - start < 30  # and nothing waited for the minute's sleep
    finally:
        await store.close()


@pytest.mark.parametrize("overlap", [True, False])
async def test_cached_reads_in_either_order_see_writes_and_harvests_elsewhere(pg_url: str, overlap: bool) -> None:
    """The copy made while the server answers is kept only when the answer says the cache held every span; the
    other order (which ``ReadOrder`` takes when it is quicker) reads the same."""
    mine, other = PostgresStore(pg_url), PostgresStore(pg_url)
    mine._read_order.overlap = overlap
    try:
        (rollout,) = await mine.enqueue([spec(1)])
        ((_, attempt),) = await mine.dequeue("w")
        rid, aid = rollout.rollout_id, attempt.attempt_id

        async def names(since: int = 0) -> list[str]:
            return [s.name for s in await mine.get_spans(aid, since=since)]

        await mine.add_spans([span(rid, aid, "a"), span(rid, aid, "b")])
        assert await names() == ["a", "b"] and await names(since=1) == ["b"]
        await other.add_spans([span(rid, aid, "c")])  # not in this store's cache
        await mine.add_spans([span(rid, aid, "d")])
        assert await names() == ["a", "b", "c", "d"] and await names(since=2) == ["c", "d"]
        got = await mine.get_spans(aid)
        got[0].attributes["mutated"] = True  # a caller's copy
        assert "mutated" not in (await mine.get_spans(aid))[0].attributes
        await mine.finish_attempt(aid, AttemptStatus.SUCCEEDED)
        await other.harvest([rid])
        with pytest.raises(NotFound):  # harvested elsewhere: the cached spans are not served
            await mine.get_spans(aid)
    finally:
        await mine.close()
        await other.close()
