"""How the SQLite store turns new rollouts and spans into rows (``tether.store.sqlite``): validated, encoded as
orjson bytes, numbers bound as SQLite's REAL columns give them back."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tether import _json
from tether.store._frozen import frozen_size, snapshot
from tether.store._span_cache import SPAN_BYTES
from tether.store._validate import span_attributes, validate_spec
from tether.store.errors import InvalidInput
from tether.store.sqlite._rows import NEXT_QUEUE_POS
from tether.types import Mode, Rollout, RolloutSpec, Span, SpanKind, new_id


def real(value: float | None) -> float | None:
    """A number bound to a REAL column (a Python int past 64 bits would not bind)."""
    return None if value is None else float(value)


def rollout_rows(specs: Sequence[RolloutSpec], now: float) -> list[tuple[Any, ...]]:
    """One row per spec (each validated first), with a new rollout id; ``InvalidInput`` for any bad spec."""
    for spec in specs:
        validate_spec(spec)
    try:
        blobs = [(_json.dumps(s.input), _json.dumps(s.metadata)) for s in specs]
    except TypeError as exc:
        raise InvalidInput(f"rollout input/metadata: {exc}") from None
    rows = []
    for spec, (input_blob, meta_blob) in zip(specs, blobs, strict=True):
        rid = new_id("ro")
        rows.append(
            (rid, input_blob, spec.task_id or rid, Mode(spec.mode).value, meta_blob, spec.max_attempts,
             real(spec.timeout_s), real(spec.heartbeat_timeout_s), spec.resources_version, now)
        )  # fmt: skip
    return rows


def insert_rollouts(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Queue ``rows`` (from ``rollout_rows``) at the back of the queue, in order."""
    (start,) = conn.execute(f"SELECT {NEXT_QUEUE_POS}").fetchone()
    conn.executemany(
        "INSERT INTO rollouts (rollout_id, input, task_id, mode, status, metadata, max_attempts, "
        "timeout_s, heartbeat_timeout_s, resources_version, created_at, queue_pos) "
        "VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
        [(*row, start + i) for i, row in enumerate(rows)],
    )


def rollouts_of_rows(rows: list[tuple[Any, ...]], now: float) -> list[Rollout]:
    """The queued rollouts that ``rows`` (from ``rollout_rows``) became, decoded as a read would give them."""
    return [
        Rollout(
            rollout_id=row[0], input=_json.loads(row[1]), task_id=row[2], mode=Mode(row[3]),
            metadata=_json.loads(row[4]), max_attempts=row[5], timeout_s=row[6], heartbeat_timeout_s=row[7],
            resources_version=row[8], created_at=now,
        )
        for row in rows
    ]  # fmt: skip


def span_rows(spans: Sequence[Span], cache: bool) -> tuple[list[list[Any]], list[tuple[Span, int]]]:
    """The rows of ``spans`` (sequence 0: the insert numbers them) and, when ``cache``, each span as the span
    cache keeps it with the memory it holds. ``InvalidInput`` for any bad span."""
    rows = []
    cached: list[tuple[Span, int]] = []
    for span in spans:
        attributes = span_attributes(span)
        kind = SpanKind(span.kind)
        start, end = float(span.start_time), real(span.end_time)  # REAL columns: as a read gives them back
        if cache:
            frozen = snapshot(span.attributes, attributes)
            cached.append(
                (Span(span.rollout_id, span.attempt_id, kind, span.name, span.agent_name, frozen, span.span_id,
                      span.parent_id, start, end), frozen_size(frozen) + SPAN_BYTES)
            )  # fmt: skip
        rows.append(
            [span.attempt_id, 0, span.rollout_id, span.span_id, kind.value, span.name, span.agent_name,
             span.parent_id, start, end, attributes]
        )  # fmt: skip
    return rows, cached
