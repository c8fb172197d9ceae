"""``SqliteStore.import_rollout``: a finished rollout from elsewhere written in one transaction.

The rollout and its attempt are inserted already finished (``queue_pos`` NULL: never dequeued); a later import
of the same key appends only spans whose ids the attempt lacks and fills in the outcome (``Store.import_rollout``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from tether import _json
from tether.store.base import ImportedRollout, ImportResult, encode_import, import_id
from tether.store.sqlite._rows import IMPORTED
from tether.types import SpanKind


def import_work(item: ImportedRollout) -> Callable[[sqlite3.Connection], ImportResult]:
    """Check and encode ``item`` now (``InvalidInput``); return the write to run in a transaction."""
    spans, (input_blob, output_blob, meta_blob), encoded = encode_import(item)
    rows = []
    for span, attributes in zip(spans, encoded, strict=True):
        rows.append(
            [span.attempt_id, 0, span.rollout_id, span.span_id, SpanKind(span.kind).value, span.name,
             span.agent_name, span.parent_id, float(span.start_time),
             None if span.end_time is None else float(span.end_time), attributes]
        )  # fmt: skip
    rollout_id, attempt_id = import_id(item.key)
    status = "succeeded" if item.error is None else "failed"

    def write(conn: sqlite3.Connection) -> ImportResult:
        now = time.time()
        created = conn.execute("SELECT 1 FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone() is None
        if created:
            conn.execute(
                "INSERT INTO rollouts (rollout_id, input, task_id, mode, status, metadata, max_attempts, "
                "attempt_count, created_at, finished_at, output, error, queue_pos) "
                "VALUES (?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ?, ?, NULL)",
                (rollout_id, input_blob, rollout_id, str(item.mode), status, meta_blob, now, now, output_blob,
                 item.error),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO attempts (attempt_id, rollout_id, idx, worker_id, status, started_at, "
                "last_heartbeat_at, finished_at, error) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?)",
                (attempt_id, rollout_id, item.worker_id, status, now, now, now, item.error),
            )
        else:
            conn.execute(
                "UPDATE rollouts SET input = CASE WHEN input = ? THEN ? ELSE input END, "
                "output = CASE WHEN ? = ? THEN output ELSE ? END WHERE rollout_id = ?",
                (b"null", input_blob, output_blob, b"null", output_blob, rollout_id),
            )
            if item.error is not None:
                conn.execute(
                    "UPDATE rollouts SET status = 'failed', error = ? WHERE rollout_id = ?",
                    (item.error, rollout_id),
                )
                conn.execute(
                    "UPDATE attempts SET status = 'failed', error = ? WHERE attempt_id = ?",
                    (item.error, attempt_id),
                )
        held = {
            r[0]
            for r in conn.execute(
                f"SELECT span_id FROM spans WHERE {IMPORTED} AND attempt_id = ? "
                "AND span_id IN (SELECT value FROM json_each(?))",
                (attempt_id, _json.dumps([row[3] for row in rows]).decode()),
            )
        }
        (next_seq,) = conn.execute("SELECT next_seq FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        new = [row for row in rows if row[3] not in held]
        for i, row in enumerate(new):
            row[1] = next_seq + i
        conn.executemany(f"INSERT INTO spans VALUES ({', '.join('?' * 11)})", new)
        conn.execute("UPDATE attempts SET next_seq = ? WHERE attempt_id = ?", (next_seq + len(new), attempt_id))
        return ImportResult(rollout_id, attempt_id, created, len(new))

    return write
