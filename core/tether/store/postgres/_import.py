"""``PostgresStore.import_rollout``: a finished rollout from elsewhere written in one transaction.

The rollout row is inserted with ``ON CONFLICT DO NOTHING`` and then locked, so concurrent imports of one key
(an exporter's retry racing the first send) serialise on it: one creates, the others append only spans whose
ids are new (``Store.import_rollout``). ``queue_pos`` is NULL: no worker ever dequeues it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether.store.base import ImportedRollout, ImportResult, encode_import, import_id
from tether.types import SpanKind


def import_work(item: ImportedRollout) -> Callable[[Any], Awaitable[ImportResult]]:
    """Check and encode ``item`` now (``InvalidInput``); return the write to run in a transaction."""
    spans, (input_blob, output_blob, meta_blob), encoded = encode_import(item)
    rows = []
    for span, attributes in zip(spans, encoded, strict=True):
        rows.append(
            (span.span_id, SpanKind(span.kind).value, span.name, span.agent_name, span.parent_id,
             float(span.start_time), None if span.end_time is None else float(span.end_time), attributes)
        )  # fmt: skip
    rollout_id, attempt_id = import_id(item.key)
    status = "succeeded" if item.error is None else "failed"

    async def write(conn: Any) -> ImportResult:
        now = time.time()
        inserted = await conn.fetchval(
            "INSERT INTO tether_rollouts (rollout_id, input, task_id, mode, status, metadata, max_attempts, "
            "attempt_count, created_at, finished_at, output, error, queue_pos) "
            "VALUES ($1, $2, $1, $3, $4, $5, 1, 1, $6, $6, $7, $8, NULL) "
            "ON CONFLICT (rollout_id) DO NOTHING RETURNING 1",
            rollout_id, input_blob, str(item.mode), status, meta_blob, now, output_blob, item.error,
        )  # fmt: skip
        created = inserted is not None
        if created:
            await conn.execute(
                "INSERT INTO tether_attempts (attempt_id, rollout_id, idx, worker_id, status, started_at, "
                "last_heartbeat_at, finished_at, error) VALUES ($1, $2, 1, $3, $4, $5, $5, $5, $6)",
                attempt_id, rollout_id, item.worker_id, status, now, item.error,
            )  # fmt: skip
        else:
            await conn.execute(
                "UPDATE tether_rollouts SET input = CASE WHEN input = $2 THEN $3 ELSE input END, "
                "output = CASE WHEN $4 = $2 THEN output ELSE $4 END, "
                "status = CASE WHEN $5::text IS NULL THEN status ELSE 'failed' END, error = COALESCE($5, error) "
                "WHERE rollout_id = $1",
                rollout_id, b"null", input_blob, output_blob, item.error,
            )  # fmt: skip
            if item.error is not None:
                await conn.execute(
                    "UPDATE tether_attempts SET status = 'failed', error = $2 WHERE attempt_id = $1",
                    attempt_id, item.error,
                )  # fmt: skip
        next_seq = await conn.fetchval(
            "SELECT next_seq FROM tether_attempts WHERE attempt_id = $1 FOR UPDATE", attempt_id
        )
        held = {
            r[0] for r in await conn.fetch("SELECT span_id FROM tether_spans WHERE attempt_id = $1", attempt_id)
        }
        new = [row for row in rows if row[0] not in held]
        if new:
            columns = list(zip(*new, strict=True))
            await conn.execute(
                "INSERT INTO tether_spans (attempt_id, sequence, rollout_id, span_id, kind, name, agent_name, "
                "parent_id, start_time, end_time, attributes) "
                "SELECT $1, $2 + o - 1, $3, s, k, n, a, p, st, en, at "
                "FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::float8[], "
                "$10::float8[], $11::bytea[]) WITH ORDINALITY AS t(s, k, n, a, p, st, en, at, o)",
                attempt_id, next_seq, rollout_id, *map(list, columns),
            )  # fmt: skip
            await conn.execute(
                "UPDATE tether_attempts SET next_seq = $2 WHERE attempt_id = $1", attempt_id, next_seq + len(new)
            )
        return ImportResult(rollout_id, attempt_id, created, len(new))

    return write
