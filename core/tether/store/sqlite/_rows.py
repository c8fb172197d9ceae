"""The SQLite store's schema and its span reads (``tether.store.sqlite``); rows become records in
``tether.store._rows``.

Spans are read through ``read_spans``: from the store's cache of the spans it wrote (``tether.store._span_cache``)
when it holds them all, else decoded from their rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.store._frozen import thawed_span
from tether.store._rows import SPAN_COLS, span_from_row
from tether.store._span_cache import SpanCache
from tether.store.errors import StoreError
from tether.types import Span

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
