"""PostgreSQL store (``postgresql://user@host:port/db``): one database shared by runners on many machines.

Install with ``pip install "tether[postgres]"`` (asyncpg). asyncpg rather than psycopg 3: it is asyncio-native
(the store's methods are coroutines on the runner's or server's loop), speaks the binary protocol with
prepared statements cached per connection, and delivers LISTEN notifications as callbacks on the loop.

Semantics are the SQLite store's (``tether.store.sqlite``), with PostgreSQL doing the concurrency:

- ``dequeue`` claims rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` in queue order, so any number of
  workers, in any number of processes, take different rollouts without waiting on each other; a requeued
  rollout takes a fresh position from the ``tether_queue_pos`` sequence (the back of the queue).
- Every change is one transaction (``tether.store.postgres._conn``); changes to a rollout lock its row first, then
  its attempts', so finishing, cancelling and the stale sweep never interleave on one rollout.
- ``add_spans`` takes each attempt's sequence numbers by bumping ``tether_attempts.next_seq`` (which also
  locks the attempt: concurrent batches of one attempt get consecutive numbers) and inserts the batch; an
  invalid span rolls the whole batch back. It and ``finish_attempt`` are one round trip each: PL/pgSQL
  functions of the schema (``tether.store.postgres._schema``) run their steps, so a call is one statement, atomic
  on its own, rather than ``BEGIN``, four statements and ``COMMIT`` each waited for (the cost that dominated
  PostgreSQL's lifecycle on a busy machine).
- ``wait_for_rollouts`` is woken by ``LISTEN``/``NOTIFY``: a trigger announces each rollout that reaches a
  finished status when its transaction commits.
- The schema is created and migrated on first use (``tether.store.postgres._schema``), never dropped.
- The statements of a rollout's life are in ``tether.store.postgres._ops``; new rollouts and spans become rows in
  ``tether.store.postgres._encode``; resources, harvests and the SQL dialect are in
  ``tether.store.postgres._queries``; the listing and counting statements (``tether.store._sql``) and the row
  mappings (``tether.store._rows``) are shared with SQLite.

A server that goes away (restart, failover) makes calls raise ``StoreError`` naming it; once it is back the
pool reconnects and the next call works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether import _json
from tether.store._rows import ATTEMPT_COLS, attempt_from_row, qualified, rollout_from_row
from tether.store._span_cache import DEFAULT_SPAN_CACHE_BYTES, SpanCache
from tether.store._sql import count_sql, list_sql
from tether.store._validate import Ending
from tether.store.base import Harvested, ImportedRollout, ImportResult, Store
from tether.store.errors import InvalidTransition, NotFound, StoreError, validate_int, validate_number
from tether.store.postgres._conn import Connections
from tether.store.postgres._encode import INSERT_ROLLOUTS, rollout_rows, span_columns, span_refusal
from tether.store.postgres._import import import_work
from tether.store.postgres._ops import (
    ADD_SPANS,
    CLAIM_QUEUED,
    FINISH_ATTEMPT,
    ROLLOUT_BY_ID,
    cancel,
    claim_queued,
    lock_running_attempt,
    sweep_stale,
)
from tether.store.postgres._overlap import ReadOrder
from tether.store.postgres._queries import POSTGRES, publish_resources, take_finished
from tether.store.postgres._schema import NOT_RUNNING, UNKNOWN_ATTEMPT
from tether.store.postgres._spans import NEXT_SEQ, SPANS_FROM, read_spans
from tether.store.retry import DEFAULT_OUTAGE_S, is_outage
from tether.store.rollout_query import RolloutPage, RolloutQuery, VersionUsage, sql_page, usage_of, usage_sql
from tether.types import Resources, RolloutStatus

if TYPE_CHECKING:
    from tether.types import Attempt, LLMEndpoint, Mode, PromptTemplate, Rollout, RolloutSpec, Span

_CLAIM_CHUNK = 256  # rollouts one dequeue statement claims at most


async def _ready_connection(conn: Any) -> None:
    """Ready a new connection for the calls a training run makes most (``tether.store.postgres._pool`` opens it
    in the background while callers use the busy ones): asyncpg prepares each statement once per connection (and
    introspects the array types of ``tether_add_spans``' arguments, 15-40 ms on a cold connection), and
    PostgreSQL compiles each PL/pgSQL function once per connection. Each statement is run so that it changes
    nothing: no rows to insert, a claim of none, an unknown attempt."""
    await conn.executemany(INSERT_ROLLOUTS, [])
    await conn.fetch(CLAIM_QUEUED, 0, [], "", 0.0)
    await conn.fetchval(ADD_SPANS, [], [], 0.0, *([[]] * 10))
    try:
        await conn.fetchrow(FINISH_ATTEMPT, "", "succeeded", None, None, None, 0.0)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != UNKNOWN_ATTEMPT:
            raise
    for sql, args in ((ROLLOUT_BY_ID, ("",)), (NEXT_SEQ, ("",)), (SPANS_FROM, ("", 0))):
        await conn.fetch(sql, *args)


class PostgresStore(Store):
    """A store in a PostgreSQL database. Creates (or migrates) its ``tether_*`` tables on first use."""

    def __init__(self, url: str, *, pool_size: int = 10, span_cache_bytes: int = DEFAULT_SPAN_CACHE_BYTES) -> None:
        """``span_cache_bytes`` bounds the memory of the spans this store wrote and keeps for reads
        (``tether.store.postgres._spans``); 0 turns the cache off."""
        self.url = url
        self._db = Connections(url, max_size=pool_size, warm=_ready_connection)
        self._cache = SpanCache(span_cache_bytes)
        self._read_order = ReadOrder()  # cached reads: copy while the server answers, or after (_pg_overlap)

    async def close(self) -> None:
        self._cache.clear()
        await self._db.close()

    # -- rollouts -----------------------------------------------------------------------------------------

    async def enqueue(self, specs: Sequence[RolloutSpec]) -> list[Rollout]:
        rollouts, rows = rollout_rows(specs, time.time())
        if not rows:
            return []

        async def insert(conn: Any) -> None:
            await conn.executemany(INSERT_ROLLOUTS, rows)

        # asyncpg's executemany is atomic on its own (one implicit transaction, since 0.22): no BEGIN/COMMIT
        await self._db.transaction(insert, single_statement=True)
        return rollouts

    async def _dequeue(self, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
        now = time.time()

        async def claim(conn: Any) -> list[tuple[Rollout, Attempt]]:
            claimed: list[tuple[Rollout, Attempt]] = []
            while len(claimed) < limit:  # (in chunks: the attempt ids are made here, one per rollout asked for)
                chunk = await claim_queued(conn, worker_id, min(limit - len(claimed), _CLAIM_CHUNK), now)
                claimed += chunk
                if len(chunk) < _CLAIM_CHUNK:
                    break
            return claimed

        # up to a chunk, one statement: atomic on its own, so no BEGIN/COMMIT round trips
        return await self._db.transaction(claim, single_statement=limit <= _CLAIM_CHUNK)

    async def _finish_attempt(self, attempt_id: str, ending: Ending) -> Rollout:
        async def finish(conn: Any) -> Rollout:
            try:  # one statement, atomic on its own (``tether.store.postgres._schema``: the steps it takes)
                row = await conn.fetchrow(
                    FINISH_ATTEMPT,
                    attempt_id,
                    ending.status.value,
                    ending.output,
                    ending.reward,
                    ending.error,
                    time.time(),
                )
            except self._db.asyncpg.exceptions.PostgresError as exc:
                if exc.sqlstate == UNKNOWN_ATTEMPT:
                    raise NotFound(f"unknown attempt {attempt_id!r}") from None
                if exc.sqlstate == NOT_RUNNING:
                    raise InvalidTransition(f"attempt {attempt_id} is already {exc.args[0]}") from None
                raise
            return rollout_from_row(row)

        return await self._db.transaction(finish, single_statement=True)

    async def heartbeat(self, attempt_id: str) -> None:
        async def beat(conn: Any) -> None:
            row = await conn.fetchrow(
                "UPDATE tether_attempts SET last_heartbeat_at = $2 WHERE attempt_id = $1 AND status = 'running' "
                "RETURNING 1",
                attempt_id,
                time.time(),
            )
            if row is None:
                await lock_running_attempt(conn, attempt_id)  # raises the right error

        await self._db.transaction(beat)

    async def requeue_stale(self, now: float | None = None) -> list[str]:
        when = time.time() if now is None else validate_number(now, "now")

        return await self._db.transaction(lambda conn: sweep_stale(conn, when))

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        return await self._db.transaction(lambda conn: cancel(conn, rollout_id))

    async def get_rollout(self, rollout_id: str) -> Rollout:
        rows = await self._db.fetch(ROLLOUT_BY_ID, rollout_id)
        if not rows:
            raise NotFound(f"unknown rollout {rollout_id!r}")
        return rollout_from_row(rows[0])

    async def _list_rollouts(
        self, status: RolloutStatus | None, mode: Mode | None, rollout_ids: list[str] | None, limit: int | None
    ) -> list[Rollout]:
        sql, args = list_sql(POSTGRES, status, mode, rollout_ids, limit)
        return [rollout_from_row(row) for row in await self._db.fetch(sql, *args)]

    async def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        async def fetch(sql: str, args: list[Any]) -> list[Any]:
            return await self._db.fetch(sql, *args)

        return await sql_page(query, fetch, POSTGRES)

    async def count_rollouts(self, *, mode: Mode | None = None) -> dict[str, int]:
        out = {s.value: 0 for s in RolloutStatus}
        sql, args = count_sql(POSTGRES, mode)
        rows = await self._db.fetch(sql, *args)
        out.update({row[0]: int(row[1]) for row in rows})
        return out

    async def usage_by_version(self) -> dict[int, VersionUsage]:
        return usage_of(await self._db.fetch(usage_sql(POSTGRES)))

    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        # one statement (one round trip, one snapshot): the rollout, joined to its attempts if it has any
        rows = await self._db.fetch(
            f"SELECT r.rollout_id, {qualified('a', ATTEMPT_COLS)} FROM tether_rollouts r "
            "LEFT JOIN tether_attempts a ON a.rollout_id = r.rollout_id WHERE r.rollout_id = $1 ORDER BY a.idx",
            rollout_id,
        )
        if not rows:
            raise NotFound(f"unknown rollout {rollout_id!r}")
        return [attempt_from_row(row[1:]) for row in rows if row[1] is not None]

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], timeout: float | None = None, poll_s: float = 0.05
    ) -> list[Rollout]:
        """Woken by NOTIFY when a watched rollout finishes (``poll_s`` is not used: nothing polls). A server that
        goes away meanwhile (a restart, a failover) is waited for, listening again once it is back, for up to
        ``DEFAULT_OUTAGE_S`` (60 s) at a time; a longer outage raises its ``StoreError``."""
        wanted = list(rollout_ids)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        woken = asyncio.Event()
        listener = await self._db.listener()  # listening before the first look: no finish slips between
        listener.watch(woken, frozenset(wanted))
        outage: float | None = None  # when the server went away (loop time), while it is away
        delay = 0.1
        try:
            while True:
                woken.clear()
                try:
                    if listener.lost:  # the listening connection died: listen again (or report the server gone)
                        listener.unwatch(woken)
                        listener = await self._db.listener()
                        listener.watch(woken, frozenset(wanted))
                    done = [r for r in await self.list_rollouts(rollout_ids=wanted) if r.status.finished]
                except StoreError as exc:
                    if not is_outage(exc):
                        raise
                    outage = loop.time() if outage is None else outage
                    left = None if deadline is None else deadline - loop.time()
                    if loop.time() - outage + delay > DEFAULT_OUTAGE_S or (left is not None and left <= 0):
                        raise
                    await asyncio.sleep(delay if left is None else max(0.0, min(delay, left)))
                    delay = min(delay * 2, 2.0)
                    continue
                outage, delay = None, 0.1
                left = None if deadline is None else deadline - loop.time()
                if len(done) == len(wanted) or (left is not None and left <= 0):
                    return done
                try:
                    await asyncio.wait_for(woken.wait(), left)
                except TimeoutError:
                    pass
        finally:
            listener.unwatch(woken)

    # -- spans --------------------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        columns, cached = span_columns(spans, self._cache.max_bytes > 0)
        if not spans:
            return []
        counts: dict[str, int] = {}
        for aid in columns[0]:
            counts[aid] = counts.get(aid, 0) + 1
        wanted = sorted(counts)  # a fixed lock order for batches that share attempts

        async def insert(conn: Any) -> list[int]:
            try:  # one statement, atomic on its own (``tether.store.postgres._schema``: the steps it takes)
                found = await conn.fetchval(
                    ADD_SPANS, wanted, [counts[aid] for aid in wanted], time.time(), *columns
                )
            except self._db.asyncpg.exceptions.PostgresError as exc:
                raise span_refusal(exc, columns) from None
            return list(found)

        sequences = await self._db.transaction(insert, single_statement=True)
        if cached:  # committed: from now on a read of these spans thaws them instead of decoding them
            for (span, _), sequence in zip(cached, sequences, strict=True):
                span.sequence = sequence
            self._cache.add(cached)
        return sequences

    async def import_rollout(self, item: ImportedRollout) -> ImportResult:
        return await self._db.transaction(import_work(item))

    async def get_spans(self, attempt_id: str, *, since: int = 0) -> list[Span]:
        validate_int(since, "since")
        found = await read_spans(self._db, self._cache, attempt_id, since, self._read_order)
        if found is None:
            raise NotFound(f"unknown attempt {attempt_id!r}")
        return found

    # -- resources ----------------------------------------------------------------------------------------

    async def add_resources(
        self, *, llm: LLMEndpoint | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> Resources:
        return await self._db.transaction(lambda conn: publish_resources(conn, llm, prompts))

    async def get_resources(self, version: int | None = None) -> Resources | None:
        if version is None:
            rows = await self._db.fetch("SELECT data FROM tether_resources ORDER BY version DESC LIMIT 1")
            return Resources.from_dict(_json.loads(rows[0][0])) if rows else None
        validate_int(version, "version")
        rows = await self._db.fetch("SELECT data FROM tether_resources WHERE version = $1", version)
        if not rows:
            raise NotFound(f"unknown resources version {version}")
        return Resources.from_dict(_json.loads(rows[0][0]))

    # -- memory -------------------------------------------------------------------------------------------

    async def harvest(self, rollout_ids: Sequence[str] | None = None) -> list[Harvested]:
        return await self._db.transaction(lambda conn: take_finished(conn, self._cache, rollout_ids))


__all__ = ["PostgresStore"]
