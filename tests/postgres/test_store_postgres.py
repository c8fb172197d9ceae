"""The PostgreSQL store on a real server: the shared conformance suite (directly and behind ``tether store
serve``'s HTTP API), and what only PostgreSQL does (the versioned schema, waits woken by NOTIFY, URLs)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tether.server import start_server
from tether.store import Store, StoreError, open_store
from tether.store.errors import NotFound
from tether.store.http.client import HttpStore
from tether.store.http.server import StoreServer
from tether.store.postgres import PostgresStore
from tether.store.postgres._schema import MIGRATIONS, SCHEMA_VERSION
from tether.testing.pg_server import TempPostgres
from tether.testing.store_conformance import StoreConformance, span, spec
from tether.types import AttemptStatus, RolloutStatus


class TestPostgresStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _server(self, pg_server: TempPostgres) -> None:
        self.pg = pg_server

    async def make_store(self, tmp_path: Path) -> Store:
        store = open_store(self.pg.new_schema())
        assert isinstance(store, PostgresStore)
        return store


class TestHttpOverPostgres(StoreConformance):
    """``tether store serve`` in front of PostgreSQL (the server in-process here; as a command below)."""

    server: StoreServer
    backend: Store

    @pytest.fixture(autouse=True)
    def _server(self, pg_server: TempPostgres) -> None:
        self.pg = pg_server

    async def make_store(self, tmp_path: Path) -> Store:
        self.backend = open_store(self.pg.new_schema())
        self.server = await start_server(self.backend)
        return HttpStore(self.server.url)

    async def close_store(self, store: Store) -> None:
        await store.close()
        await self.server.stop()
        await self.backend.close()


async def test_schema_is_versioned_and_data_survives_reopening(pg_server: TempPostgres, pg_url: str) -> None:
    store = PostgresStore(pg_url)
    (rollout,) = await store.enqueue([spec(1)])
    ((_, attempt),) = await store.dequeue("w")
    assert await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, f"s{i}") for i in range(3)]) == [
        0,
        1,
        2,
    ]
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.list_rollouts()
    database = pg_url.rsplit("/", 1)[1]
    applied = pg_server.psql("SELECT version FROM tether_schema_migrations ORDER BY version", database)
    assert applied.split() == [str(v) for v in sorted(MIGRATIONS)] and SCHEMA_VERSION == max(MIGRATIONS)

    again = PostgresStore(pg_url)  # opening again migrates nothing and keeps everything
    assert [r.rollout_id for r in await again.list_rollouts(status=RolloutStatus.RUNNING)] == [rollout.rollout_id]
    assert await again.add_spans([span(rollout.rollout_id, attempt.attempt_id, "s3")]) == [3]
    await again.close()
    assert pg_server.psql("SELECT count(*) FROM tether_schema_migrations", database).strip() == str(
        len(MIGRATIONS)
    )

    pg_server.psql(f"INSERT INTO tether_schema_migrations (version) VALUES ({SCHEMA_VERSION + 1})", database)
    newer = PostgresStore(pg_url)
    with pytest.raises(StoreError, match="newer tether"):
        await newer.list_rollouts()
    await newer.close()


async def test_many_stores_opening_one_new_database_at_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(8)]
    results = await asyncio.gather(*(s.enqueue([spec(i)]) for i, s in enumerate(stores)))
    assert len({r[0].rollout_id for r in results}) == 8
    assert len(await stores[0].list_rollouts()) == 8
    for s in stores:
        await s.close()


async def test_wait_for_rollouts_is_woken_by_notify_not_polling(pg_url: str) -> None:
    store, other = PostgresStore(pg_url), PostgresStore(pg_url)  # the finisher is another client
    await store.enqueue([spec(1), spec(2)])
    (r1, a1), (r2, _) = await other.dequeue("w", limit=2)

    async def finish_later() -> float:
        await asyncio.sleep(0.2)
        await other.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED)
        await other.cancel_rollout(r2.rollout_id)
        return time.monotonic()

    task = asyncio.create_task(finish_later())
    done = await store.wait_for_rollouts([r1.rollout_id, r2.rollout_id], timeout=60, poll_s=3600)
    woken = time.monotonic()
    finished = await task
    assert {r.status for r in done} == {RolloutStatus.SUCCEEDED, RolloutStatus.CANCELLED}
    assert woken - finished < 2.0  # a poll every poll_s (an hour) would not have seen it yet
    await store.close()
    await other.close()


async def test_unreachable_server_is_a_clear_store_error() -> None:
    store = open_store("postgresql://nobody@127.0.0.1:1/nothing")
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/nothing is unreachable"):
        await store.list_rollouts()
    await store.close()


async def test_many_concurrent_first_calls_on_one_store(pg_url: str) -> None:
    """16 tasks that all make the store's first call at once share one pool (a benchmark once hung here)."""
    store = PostgresStore(pg_url)
    results = await asyncio.wait_for(asyncio.gather(*(store.enqueue([spec(i)]) for i in range(16))), 60)
    assert len({r[0].rollout_id for r in results}) == 16
    claimed = await asyncio.wait_for(asyncio.gather(*(store.dequeue(f"w{i}") for i in range(16))), 60)
    assert sorted(r.rollout_id for got in claimed for r, _ in got) == sorted(r[0].rollout_id for r in results)
    await store.close()


class TestPostgresWithoutSpanCache(StoreConformance):
    """Every read decoded from the database, as a process that did not write the spans reads them."""

    @pytest.fixture(autouse=True)
    def _server(self, pg_server: TempPostgres) -> None:
        self.pg = pg_server

    async def make_store(self, tmp_path: Path) -> Store:
        return PostgresStore(self.pg.new_schema(), span_cache_bytes=0)


async def test_reads_combine_cached_spans_with_those_another_process_wrote(pg_url: str) -> None:
    mine, other = PostgresStore(pg_url), PostgresStore(pg_url)  # two stores, as two processes have
    (rollout,) = await mine.enqueue([spec(1)])
    ((_, attempt),) = await mine.dequeue("w")
    rid, aid = rollout.rollout_id, attempt.attempt_id

    def named(name: str) -> object:
        return span(rid, aid, name, attributes={"name": name, "ids": list(range(50))}, start_time=1)

    assert await mine.add_spans([named("a"), named("b")]) == [0, 1]
    assert await other.add_spans([named("c")]) == [2]
    assert await mine.add_spans([named("d")]) == [3]
    for store in (mine, other):
        got = await store.get_spans(aid)
        assert [(s.name, s.sequence, s.attributes["name"]) for s in got] == [
            ("a", 0, "a"), ("b", 1, "b"), ("c", 2, "c"), ("d", 3, "d")
        ]  # fmt: skip
        assert [s.name for s in await store.get_spans(aid, since=2)] == ["c", "d"]
        assert got[0].to_dict() == (await other.get_spans(aid))[0].to_dict()  # cached == decoded, field by field
        assert type(got[0].start_time) is float
        got[0].attributes["ids"].append("mutated")  # a caller's copy: the cache is not changed by it
    assert len((await mine.get_spans(aid))[0].attributes["ids"]) == 50
    await mine.finish_attempt(aid, AttemptStatus.SUCCEEDED)
    (harvested,) = await other.harvest([rid])
    assert [s.name for s in harvested.spans] == ["a", "b", "c", "d"]
    with pytest.raises(NotFound):  # harvested by the other process: the spans this one cached are not read
        await mine.get_spans(aid)
    await mine.close()
    await other.close()


async def test_a_small_span_cache_evicts_and_reads_stay_right(pg_url: str) -> None:
    store = PostgresStore(pg_url, span_cache_bytes=8192)  # about two of these spans
    await store.enqueue([spec(i) for i in range(6)])
    claimed = await store.dequeue("w", limit=6)
    for k, (rollout, attempt) in enumerate(claimed):
        spans = [
            span(rollout.rollout_id, attempt.attempt_id, f"{k}-{j}", attributes={"ids": list(range(k, k + 200))})
            for j in range(3)
        ]
        await store.add_spans(spans)
    for k, (_, attempt) in enumerate(claimed):
        got = await store.get_spans(attempt.attempt_id)
        assert [(s.name, s.attributes["ids"][0]) for s in got] == [(f"{k}-{j}", k) for j in range(3)]
    await store.close()


async def test_cached_reads_see_every_later_write_from_any_store(pg_url: str) -> None:
    """The span cache is asked nothing without the database: each read checks the attempt's ``next_seq``, so
    spans added after a read (by this store or another), late spans of a finished attempt from another
    process, and a harvest are all seen by the next read. (A finished attempt is not immutable: late spans of
    one that did not time out are kept, so a finished attempt's cached spans are not enough on their own.)"""
    mine, other = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        (rollout,) = await mine.enqueue([spec(1)])
        ((_, attempt),) = await mine.dequeue("w")
        rid, aid = rollout.rollout_id, attempt.attempt_id

        async def names(store: PostgresStore, since: int = 0) -> list[str]:
            return [s.name for s in await store.get_spans(aid, since=since)]

        await mine.add_spans([span(rid, aid, "a")])
        assert await names(mine) == ["a"]  # read (and cached)
        await mine.add_spans([span(rid, aid, "b")])
        assert await names(mine) == ["a", "b"]  # this store's next write
        await other.add_spans([span(rid, aid, "c")])
        assert await names(mine) == ["a", "b", "c"]  # another store's write
        await mine.finish_attempt(aid, AttemptStatus.SUCCEEDED)
        assert await names(mine) == ["a", "b", "c"]
        await other.add_spans([span(rid, aid, "late")])  # a late span of the finished attempt, from elsewhere
        assert await names(mine) == ["a", "b", "c", "late"] and await names(mine, since=3) == ["late"]
        (harvested,) = await mine.harvest([rid])
        assert [s.name for s in harvested.spans] == ["a", "b", "c", "late"]
        assert mine._cache.bytes == 0  # harvested here: dropped from the cache
        for store in (mine, other):
            with pytest.raises(NotFound):
                await store.get_spans(aid)
    finally:
        await mine.close()
        await other.close()
