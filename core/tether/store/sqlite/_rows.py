"""The SQLite store's schema and how its rows become tether records (``tether.store.sqlite``).

Spans are read through ``read_spans``: from the store's cache of the spans it wrote (``tether.store._span_cache``)
when it holds them all, else decoded from their rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether import _json
from tether.store._frozen import thawed_span
from tether.store._span_cache import SpanCache
from tether.store.errors import StoreError
from tether.types import Attempt, AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE rollouts (
    seq INTEGER PRIMARY KEY,
    rollout_id TEXT NOT NULL UNIQUE,
    input BLOB NOT NULL,
    task_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    status TEXT NOT NULL,
    metadata BLOB NOT NULL,
    max_attempts INTEGER NOT NULL,
    timeout_s REAL,
    heartbeat_timeout_s REAL,
    resources_version INTEGER,
    attempt_count INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    finished_at REAL,
    output BLOB,
    reward REAL,
    error TEXT,
    queue_pos INTEGER
);
CREATE INDEX rollouts_queue ON rollouts (queue_pos) WHERE queue_pos IS NOT NULL;
CREATE INDEX rollouts_status ON rollouts (status);
CREATE TABLE attempts (
    attempt_id TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    last_heartbeat_at REAL NOT NULL,
    finished_at REAL,
    error TEXT,
    next_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX attempts_rollout ON attempts (rollout_id, idx);
CREATE INDEX attempts_running ON attempts (status) WHERE status = 'running';
CREATE TABLE spans (
    attempt_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    rollout_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    agent_name TEXT,
    parent_id TEXT,
    start_time REAL NOT NULL,
    end_time REAL,
    attributes BLOB NOT NULL
);
CREATE UNIQUE INDEX spans_order ON spans (attempt_id, sequence);
CREATE TABLE resources (version INTEGER PRIMARY KEY, data BLOB NOT NULL);
"""

#: an imported trace's spans by id, to skip those it already holds (``tether.store.sqlite._import``); partial,
#: so that the spans of enqueued rollouts (the hot path) do not pay for it
IMPORTED = "substr(attempt_id, 1, 7) = 'at-imp-'"
IMPORTED_SPANS_INDEX = f"CREATE INDEX IF NOT EXISTS spans_imported ON spans (attempt_id, span_id) WHERE {IMPORTED}"

#: what the dashboard's pages read (``tether.store.rollout_query``): rollouts by reward, by task, and counted
#: by mode and status from an index alone; made on open, so files written before them get them too
PAGE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS rollouts_reward ON rollouts (reward)",
    "CREATE INDEX IF NOT EXISTS rollouts_task ON rollouts (task_id)",
    "CREATE INDEX IF NOT EXISTS rollouts_mode_status ON rollouts (mode, status)",
)

ROLLOUT_COLS = (
    "rollout_id, input, task_id, mode, status, metadata, max_attempts, timeout_s, heartbeat_timeout_s, "
    "resources_version, attempt_count, created_at, finished_at, output, reward, error"
)
ATTEMPT_COLS = "attempt_id, rollout_id, idx, worker_id, status, started_at, last_heartbeat_at, finished_at, error"
SPAN_COLS = (
    "rollout_id, attempt_id, kind, name, agent_name, attributes, span_id, parent_id, start_time, end_time, "
    "sequence"
)
NEXT_QUEUE_POS = "(SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM rollouts)"


def create_schema(conn: sqlite3.Connection, path: Path | str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) FROM tether_schema").fetchone()
        if row[0] is None:
            # executescript() would commit on its own: run the schema statement by statement instead
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO tether_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            conn.execute(IMPORTED_SPANS_INDEX)
            for index in PAGE_INDEXES:
                conn.execute(index)
        elif row[0] > SCHEMA_VERSION:
            raise StoreError(
                f"{path} was written by a newer tether (store schema {row[0]}, this one knows {SCHEMA_VERSION}); "
                "upgrade tether or use another file"
            )
        else:
            conn.execute(IMPORTED_SPANS_INDEX)  # a file written before imports had their index
            for index in PAGE_INDEXES:
                conn.execute(index)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def qualified(alias: str, cols: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in cols.split(","))


def rollout_from_row(row: Sequence[Any]) -> Rollout:
    return Rollout(
        rollout_id=row[0], input=_json.loads(row[1]), task_id=row[2], mode=Mode(row[3]),
        status=RolloutStatus(row[4]), metadata=_json.loads(row[5]), max_attempts=row[6], timeout_s=row[7],
        heartbeat_timeout_s=row[8], resources_version=row[9], attempt_count=row[10], created_at=row[11],
        finished_at=row[12], output=None if row[13] is None else _json.loads(row[13]), reward=row[14],
        error=row[15],
    )  # fmt: skip


def attempt_from_row(row: Sequence[Any]) -> Attempt:
    return Attempt(
        attempt_id=row[0], rollout_id=row[1], index=row[2], worker_id=row[3], status=AttemptStatus(row[4]),
        started_at=row[5], last_heartbeat_at=row[6], finished_at=row[7], error=row[8],
    )  # fmt: skip


SPAN_KINDS = {kind.value: kind for kind in SpanKind}


def span_from_row(row: Sequence[Any]) -> Span:
    # positional, with the kind looked up rather than constructed: this runs once per span read from the file
    return Span(row[0], row[1], SPAN_KINDS[row[2]], row[3], row[4], _json.loads(row[5]), row[6], row[7], row[8],
                row[9], row[10])  # fmt: skip


def read_spans(conn: sqlite3.Connection, cache: SpanCache, attempt_id: str, since: int) -> list[Span] | None:
    """The attempt's spans from ``since`` on, in order (None if the attempt is unknown), read by one statement:
    thawed from ``cache`` when it holds them all, else decoded from the file. The attempt's ``next_seq`` says
    which exist: a batch's rows and its ``next_seq`` are written in one transaction."""
    cached = cache.spans_of(attempt_id)
    if cached is not None:
        row = conn.execute("SELECT next_seq FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        if row is None:
            return None
        wanted = range(max(since, 0), row[0])
        if all(seq in cached for seq in wanted):
            return [thawed_span(cached[seq]) for seq in wanted]
    rows = conn.execute(  # none cached, or some were written by another process, or evicted
        f"SELECT {SPAN_COLS} FROM spans WHERE attempt_id = ? AND sequence >= ? ORDER BY sequence",
        (attempt_id, since),
    ).fetchall()
    if not cached:
        return [span_from_row(row) for row in rows]
    return [thawed_span(cached[row[10]]) if row[10] in cached else span_from_row(row) for row in rows]
