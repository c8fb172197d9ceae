"""SQLite store (``sqlite:///path.db``), the embedded default: one file, several processes, survives restarts.

The file is in WAL mode with ``synchronous=NORMAL``: a committed transaction survives the death of the
process (SIGKILL included); only an OS crash or power loss can lose the last few. Every change is one
transaction (or one savepoint of a shared one: group commit, below); writers take the write lock up front
(``BEGIN IMMEDIATE``), so a rollout is handed to exactly one worker even when workers in other processes
dequeue from the same file, and a busy file is waited on (``busy_timeout``) rather than failing. Work runs
inline on the caller's thread: each call is a few short statements, cheaper than a hop to a thread pool. One
connection per store, guarded by a lock, so a store may also be shared between threads.

Group commit (``tether.store.sqlite._group_commit``): writes that reach the store in the same turn of its event
loop share one transaction, each in a savepoint of its own; a lone write commits at once.

Span sequence numbers come from ``attempts.next_seq`` inside the writing transaction; spans are inserted
with one ``executemany``. JSON columns (inputs, outputs, metadata, span attributes) are orjson bytes. The
statements each change runs inside its transaction (claiming, ending, sweeping, cancelling, inserting spans)
are in ``tether.store.sqlite._lifecycle``; new rollouts and spans become rows in ``tether.store.sqlite._encode``,
resources, harvests and the SQL dialect are in ``tether.store.sqlite._queries``; the listing and counting
statements (``tether.store._sql``) and the row mappings (``tether.store._rows``) are shared with PostgreSQL.

Speed: a thread of the store's own runs passive WAL checkpoints so that commits rarely stall on one
(``tether.store.sqlite._wal``); SQLite's own autocheckpoint stays on, raised to ``WAL_CAP_BYTES``, as the
bound on the WAL's size. (Larger pages were tried: faster for span batches, slower for the small rollout
transactions.) Neither changes what survives a crash: a commit is durable once ``COMMIT`` returns.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tether import _json
from tether.store._rows import rollout_from_row
from tether.store._span_cache import DEFAULT_SPAN_CACHE_BYTES, SpanCache
from tether.store._sql import count_sql, list_sql
from tether.store._validate import Ending
from tether.store.base import Harvested, ImportedRollout, ImportResult, Store
from tether.store.errors import NotFound, StoreError, validate_int, validate_number
from tether.store.rollout_query import RolloutPage, RolloutQuery, VersionUsage, sql_page, usage_of, usage_sql
from tether.store.sqlite._conn import connect, store_error
from tether.store.sqlite._encode import insert_rollouts, rollout_rows, rollouts_of_rows, span_rows
from tether.store.sqlite._group_commit import GroupCommit
from tether.store.sqlite._import import import_work
from tether.store.sqlite._lifecycle import (
    attempts_of,
    cancel,
    claim,
    end_attempt,
    insert_spans,
    rollout_of,
    running_attempt,
    status_of,
    sweep,
)
from tether.store.sqlite._queries import SQLITE, count_in_file, insert_resources, latest_resources, take_finished
from tether.store.sqlite._rows import read_spans
from tether.store.sqlite._wal import WalCheckpointer
from tether.types import Resources, RolloutStatus

if TYPE_CHECKING:
    from tether.types import Attempt, LLMEndpoint, Mode, PromptTemplate, Rollout, RolloutSpec, Span

_T = TypeVar("_T")


class SqliteStore(Store):
    """A store in one SQLite file (or ``":memory:"``). Creates the file, its folder and the schema.

    ``span_cache_bytes`` bounds the cache of the spans this store wrote (``tether.store._span_cache``),
    counted as the memory their Python objects hold (``frozen_size``; several times their JSON); 0 turns it
    off."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_s: float = 30.0,
        span_cache_bytes: int = DEFAULT_SPAN_CACHE_BYTES,
    ) -> None:
        self.path = path if path == ":memory:" else Path(path).absolute()
        self._lock = threading.Lock()
        self._group = GroupCommit(self._tx)  # writes of one loop turn share a transaction
        self._cache = SpanCache(span_cache_bytes)
        conn = connect(self.path, busy_timeout_s)
        self._conn: sqlite3.Connection | None = conn
        self._checkpointer = (
            None if self.path == ":memory:" else WalCheckpointer(str(self.path), busy_timeout_s, self._lock)
        )
        if self._checkpointer is not None:  # a store dropped without close() does not leave its thread behind
            weakref.finalize(self, self._checkpointer.close, False)

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: commit on success, roll back on any error. SQLite's own errors (a file locked
        past the busy timeout, a full disk) leave as ``StoreError``."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError("this SqliteStore is closed; open a new one")
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                converted = self._error(exc)
                if converted is exc:
                    raise
                raise converted from exc
        if write and self._checkpointer is not None:
            self._checkpointer.poke()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """The connection, for reads that are each one statement (its own snapshot, no transaction)."""
        with self._lock:
            if self._conn is None:
                raise StoreError("this SqliteStore is closed; open a new one")
            try:
                yield self._conn
            except (sqlite3.Error, OverflowError) as exc:
                raise self._error(exc) from exc

    async def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work`` in a write transaction shared with the other writes of this loop turn (group commit)."""
        try:
            return await self._group.run(work)
        except (sqlite3.Error, OverflowError) as exc:  # raised in a savepoint of a shared transaction
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> BaseException:
        return store_error(exc, self.path)

    async def close(self) -> None:
        self._group.flush(asyncio.get_running_loop())  # writes already asked for are not dropped
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._cache.clear()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- rollouts -----------------------------------------------------------------------------------------

    async def enqueue(self, specs: Sequence[RolloutSpec]) -> list[Rollout]:
        now = time.time()
        rows = rollout_rows(specs, now)
        if not rows:
            return []
        await self._write(lambda conn: insert_rollouts(conn, rows))
        return rollouts_of_rows(rows, now)

    async def _dequeue(self, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
        return await self._write(lambda conn: claim(conn, worker_id, limit))

    async def _finish_attempt(self, attempt_id: str, ending: Ending) -> Rollout:
        def finish(conn: sqlite3.Connection) -> Rollout:
            rollout_id = running_attempt(conn, attempt_id)
            end_attempt(conn, attempt_id, rollout_id, ending)
            return rollout_of(conn, rollout_id)

        return await self._write(finish)

    async def heartbeat(self, attempt_id: str) -> None:
        def beat(conn: sqlite3.Connection) -> None:
            running_attempt(conn, attempt_id)
            conn.execute(
                "UPDATE attempts SET last_heartbeat_at = ? WHERE attempt_id = ?", (time.time(), attempt_id)
            )

        await self._write(beat)

    async def requeue_stale(self, now: float | None = None) -> list[str]:
        when = time.time() if now is None else validate_number(now, "now")

        return await self._write(lambda conn: sweep(conn, when))

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        return await self._write(lambda conn: cancel(conn, rollout_id))

    async def get_rollout(self, rollout_id: str) -> Rollout:
        with self._tx(write=False) as conn:
            return rollout_of(conn, rollout_id)

    async def _list_rollouts(
        self, status: RolloutStatus | None, mode: Mode | None, rollout_ids: list[str] | None, limit: int | None
    ) -> list[Rollout]:
        sql, args = list_sql(SQLITE, status, mode, rollout_ids, limit)
        with self._tx(write=False) as conn:
            return [rollout_from_row(row) for row in conn.execute(sql, args)]

    async def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        async def fetch(sql: str, args: list[Any]) -> list[Any]:
            with self._read() as conn:
                return conn.execute(sql, args).fetchall()

        return await sql_page(query, fetch, SQLITE)

    async def count_rollouts(self, *, mode: Mode | None = None) -> dict[str, int]:
        """Counted from an index (every entry of it: ~0.1 s per million rollouts). A file is counted on a
        connection of its own in a worker thread (WAL readers do not wait on the writer), so the event loop
        and this store's other calls go on meanwhile."""
        out = {s.value: 0 for s in RolloutStatus}
        sql, args = count_sql(SQLITE, mode)
        if self.path == ":memory:":
            with self._read() as conn:
                out.update(dict(conn.execute(sql, args).fetchall()))
            return out
        try:
            out.update(dict(await asyncio.to_thread(count_in_file, str(self.path), sql, args)))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        return out

    async def usage_by_version(self) -> dict[int, VersionUsage]:
        """One ``GROUP BY`` over the table, read aside as ``count_rollouts`` is."""
        sql = usage_sql(SQLITE)
        if self.path == ":memory:":
            with self._read() as conn:
                return usage_of(conn.execute(sql).fetchall())
        try:
            return usage_of(await asyncio.to_thread(count_in_file, str(self.path), sql, []))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        with self._tx(write=False) as conn:
            status_of(conn, rollout_id)
            return attempts_of(conn, [rollout_id])

    # -- spans --------------------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        rows, cached = span_rows(spans, self._cache.max_bytes > 0)
        if not rows:
            return []
        wanted = list(dict.fromkeys(span.attempt_id for span in spans))

        sequences = await self._write(lambda conn: insert_spans(conn, rows, wanted))
        if cached:  # committed: from now on a read of these spans thaws them instead of decoding them
            for (span, _), sequence in zip(cached, sequences, strict=True):
                span.sequence = sequence
            self._cache.add(cached)
        return sequences

    async def get_spans(self, attempt_id: str, *, since: int = 0) -> list[Span]:
        validate_int(since, "since")
        with self._read() as conn:  # one statement reads the spans: no transaction needed around it
            found = read_spans(conn, self._cache, attempt_id, since)
            if (
                found == []
                and not conn.execute("SELECT 1 FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
            ):
                found = None
        if found is None:
            raise NotFound(f"unknown attempt {attempt_id!r}")
        return found

    # -- imports ------------------------------------------------------------------------------------------

    async def import_rollout(self, item: ImportedRollout) -> ImportResult:
        return await self._write(import_work(item))

    # -- resources ----------------------------------------------------------------------------------------

    async def add_resources(
        self, *, llm: LLMEndpoint | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> Resources:
        with self._tx() as conn:
            data = insert_resources(conn, llm, prompts)
        return Resources.from_dict(_json.loads(data))

    async def get_resources(self, version: int | None = None) -> Resources | None:
        if version is not None:
            validate_int(version, "version")
        with self._tx(write=False) as conn:
            if version is None:
                return latest_resources(conn)
            row = conn.execute("SELECT data FROM resources WHERE version = ?", (version,)).fetchone()
        if row is None:
            raise NotFound(f"unknown resources version {version}")
        return Resources.from_dict(_json.loads(row[0]))

    # -- memory -------------------------------------------------------------------------------------------

    async def harvest(self, rollout_ids: Sequence[str] | None = None) -> list[Harvested]:
        with self._tx() as conn:
            rollouts, attempts, spans_of = take_finished(conn, self._cache, rollout_ids)
        self._cache.drop(spans_of)
        out = []
        for rollout in rollouts:
            mine = [a for a in attempts if a.rollout_id == rollout.rollout_id]
            out.append(
                Harvested(rollout=rollout, attempts=mine, spans=[s for a in mine for s in spans_of[a.attempt_id]])
            )
        return out


__all__ = ["SqliteStore"]
