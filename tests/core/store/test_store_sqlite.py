"""The SQLite store: the shared conformance suite, plus what only a file can do (reopen, schema)."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from tether import _json
from tether.store import Store, StoreError, open_store
from tether.store.errors import InvalidTransition, NotFound
from tether.store.sqlite import SqliteStore
from tether.store.sqlite._rows import SCHEMA_VERSION
from tether.testing.store_conformance import StoreConformance, span, spec
from tether.types import AttemptStatus, LLMEndpoint, RolloutStatus, Span


class TestSqliteStore(StoreConformance):
    async def make_store(self, tmp_path: Path) -> Store:
        return SqliteStore(tmp_path / "nested" / "store.db")


class TestSqliteInMemory(StoreConformance):
    async def make_store(self, tmp_path: Path) -> Store:
        return open_store("sqlite:///:memory:")


async def test_open_store_url_creates_folder_and_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///runs/deep/x.db")
    assert isinstance(store, SqliteStore)
    await store.enqueue([spec(1)])
    await store.close()
    assert (tmp_path / "runs" / "deep" / "x.db").is_file()
    conn = sqlite3.connect(tmp_path / "runs" / "deep" / "x.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM tether_schema").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")
    await absolute.close()
    assert (tmp_path / "abs.db").is_file()


async def test_data_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    done, running = await store.enqueue([spec(1, max_attempts=2), spec(2)])
    (queued,) = await store.enqueue([spec(3)])
    [(_, a1), (_, a2)] = await store.dequeue("w", limit=2)
    assert await store.add_spans([span(done.rollout_id, a1.attempt_id, f"s{i}") for i in range(3)]) == [0, 1, 2]
    await store.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED, output={"o": 1}, reward=0.5)
    await store.add_spans([span(running.rollout_id, a2.attempt_id, "r")])
    resources = await store.add_resources(llm=LLMEndpoint(base_url="http://127.0.0.1:9/v1"))
    before = {r.rollout_id: r for r in await store.list_rollouts()}
    await store.close()
    with pytest.raises(StoreError):
        await store.get_rollout(done.rollout_id)

    again = SqliteStore(path)
    assert {r.rollout_id: r for r in await again.list_rollouts()} == before
    assert [s.name for s in await again.get_spans(a1.attempt_id)] == ["s0", "s1", "s2"]
    assert await again.get_resources() == resources
    # sequence numbering and the queue carry on where they stopped
    assert await again.add_spans([span(running.rollout_id, a2.attempt_id, "r2")]) == [1]
    ((r, a),) = await again.dequeue("w2")
    assert r.rollout_id == queued.rollout_id and a.index == 1
    (h,) = await again.harvest()
    assert h.rollout.status == RolloutStatus.SUCCEEDED and len(h.spans) == 3
    await again.close()


async def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tether_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer tether"):
        SqliteStore(path)


async def test_concurrent_writes_commit_together_and_fail_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    queued = await store.enqueue([spec(i) for i in range(6)])
    (first,) = await store.dequeue("w0")
    # these reach the store in one loop turn: one transaction, each write in a savepoint of its own
    results = await asyncio.gather(
        *(store.dequeue(f"w{i}") for i in range(1, 6)),
        store.finish_attempt("at-nope", AttemptStatus.SUCCEEDED),
        store.add_spans([span(first[0].rollout_id, first[1].attempt_id, f"s{i}") for i in range(3)]),
        store.finish_attempt(first[1].attempt_id, AttemptStatus.SUCCEEDED, reward=1.0),
        store.finish_attempt(first[1].attempt_id, AttemptStatus.FAILED),  # already finished by the one before
        store.enqueue([spec(9)]),
        return_exceptions=True,
    )
    claimed, missing, seqs, finished, again, (late,) = results[:5], *results[5:]
    # claims are exactly-once and in queue order, as if the calls had run one after another
    assert [c[0][0].rollout_id for c in claimed] == [r.rollout_id for r in queued[1:]]
    assert isinstance(missing, NotFound)
    assert seqs == [0, 1, 2]
    assert finished.status == RolloutStatus.SUCCEEDED and finished.reward == 1.0
    assert isinstance(again, InvalidTransition)
    await store.close()

    reopened = SqliteStore(path)
    assert (await reopened.get_rollout(first[0].rollout_id)).status == RolloutStatus.SUCCEEDED
    assert [s.name for s in await reopened.get_spans(first[1].attempt_id)] == ["s0", "s1", "s2"]
    assert (await reopened.get_rollout(late.rollout_id)).status == RolloutStatus.QUEUED
    assert len(await reopened.list_rollouts(status=RolloutStatus.RUNNING)) == 5
    await reopened.close()


async def test_a_write_cancelled_before_its_turn_is_not_applied(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    dropped = asyncio.ensure_future(store.enqueue([spec(1)]))
    kept = asyncio.ensure_future(store.enqueue([spec(2)]))
    await asyncio.sleep(0)  # both are now waiting for the shared commit, which has not run yet
    dropped.cancel()
    (rollout,) = await kept
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert [r.rollout_id for r in await store.list_rollouts()] == [rollout.rollout_id]
    await store.close()


class TestSqliteWithoutSpanCache(StoreConformance):
    """Every read decoded from the file, as a process that did not write the spans reads them."""

    async def make_store(self, tmp_path: Path) -> Store:
        return SqliteStore(tmp_path / "store.db", span_cache_bytes=0)


async def test_reads_combine_cached_spans_with_those_another_process_wrote(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    mine, other = SqliteStore(path), SqliteStore(path)  # two connections, as two processes have
    (rollout,) = await mine.enqueue([spec(1)])
    ((_, attempt),) = await mine.dequeue("w")
    rid, aid = rollout.rollout_id, attempt.attempt_id

    def named(name: str) -> object:
        return span(rid, aid, name, attributes={"name": name, "ids": list(range(50))})

    assert await mine.add_spans([named("a"), named("b")]) == [0, 1]
    assert await other.add_spans([named("c")]) == [2]
    assert await mine.add_spans([named("d")]) == [3]
    for store in (mine, other):
        got = await store.get_spans(aid)
        assert [(s.name, s.sequence, s.attributes["name"]) for s in got] == [
            ("a", 0, "a"), ("b", 1, "b"), ("c", 2, "c"), ("d", 3, "d")
        ]  # fmt: skip
        assert [s.name for s in await store.get_spans(aid, since=2)] == ["c", "d"]
    await mine.finish_attempt(aid, AttemptStatus.SUCCEEDED)
    (harvested,) = await other.harvest([rid])
    assert [s.name for s in harvested.spans] == ["a", "b", "c", "d"]
    with pytest.raises(NotFound):  # harvested by the other process: the spans this one cached are gone too
        await mine.get_spans(aid)
    await mine.close()
    await other.close()


async def test_a_small_span_cache_evicts_and_reads_stay_right(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", span_cache_bytes=4096)  # about two of these spans
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


async def test_the_span_cache_bounds_the_memory_it_holds_not_json(tmp_path: Path) -> None:
    """A token id is ~6 bytes of JSON but ~40 of Python objects: the bound is on the memory the cached spans
    hold, measured here with tracemalloc as a store server holds them (each span decoded from a request)."""
    bound = 2 * 1024 * 1024
    store = SqliteStore(tmp_path / "s.db", span_cache_bytes=bound)
    await store.enqueue([spec(i) for i in range(40)])
    claimed = await store.dequeue("w", limit=40)
    encoded = [
        _json.dumps([
            span(rollout.rollout_id, attempt.attempt_id, f"{k}-{j}", attributes={
                "prompt_token_ids": [1000 + (k * 31 + j * 7 + n) % 150_000 for n in range(512)],
                "response_token_ids": [2000 + n for n in range(128)],
                "messages": [{"role": "user", "content": f"question {k} {j} " * 40}],
            }).to_dict()
            for j in range(16)
        ])
        for k, (rollout, attempt) in enumerate(claimed)
    ]  # fmt: skip
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for batch in encoded:  # as the server decodes each request's spans
            await store.add_spans([Span.from_dict(fields) for fields in _json.loads(batch)])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0 < store._cache.bytes <= bound
    assert held <= bound * 1.15, f"the cache holds {held / 2**20:.1f} MiB for a {bound / 2**20:.0f} MiB bound"
    assert held >= bound * 0.5, "the estimate of what a span holds is far too high: the cache holds little"
    got = await store.get_spans(claimed[-1][1].attempt_id)  # the newest attempt is cached and reads right
    assert [s.name for s in got] == [f"39-{j}" for j in range(16)]
    await store.close()


async def test_sqlite_errors_are_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, busy_timeout_s=0.1)
    (rollout,) = await store.enqueue([spec(1)])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
    try:
        with pytest.raises(StoreError, match=f"{path}.*locked"):
            await store.enqueue([spec(2)])
        with pytest.raises(StoreError, match="locked"):
            await store.cancel_rollout(rollout.rollout_id)
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.QUEUED  # reads go on
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert len(await store.enqueue([spec(2)])) == 1
    await store.close()


def test_a_file_that_cannot_be_a_store_is_named(tmp_path: Path) -> None:
    garbage = tmp_path / "not.db"
    garbage.write_bytes(b"this is not a database, but it is long enough to look like one" * 100)
    with pytest.raises(StoreError, match=f"cannot open the SQLite store {garbage}: file is not a database"):
        SqliteStore(garbage)
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with pytest.raises(StoreError, match=f"cannot open the SQLite store {blocked}/x.db: .*{blocked}"):
        SqliteStore(blocked / "x.db")  # its folder would be a file
