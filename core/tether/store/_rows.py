"""The columns both SQL stores read (``tether.store.sqlite``, ``tether.store.postgres``) and how a row of them
becomes a tether record: the two schemas hold the same columns in the same order, JSON values as orjson
bytes, so one mapping serves both (a SQLite row and an asyncpg record alike)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether import _json
from tether.types import Attempt, AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind

ROLLOUT_COLS = (
    "rollout_id, input, task_id, mode, status, metadata, max_attempts, timeout_s, heartbeat_timeout_s, "
    "resources_version, attempt_count, created_at, finished_at, output, reward, error"
)
ATTEMPT_COLS = "attempt_id, rollout_id, idx, worker_id, status, started_at, last_heartbeat_at, finished_at, error"
SPAN_COLS = (
    "rollout_id, attempt_id, kind, name, agent_name, attributes, span_id, parent_id, start_time, end_time, "
    "sequence"
)
SPAN_KINDS = {kind.value: kind for kind in SpanKind}


def qualified(alias: str, cols: str) -> str:
    """``cols`` (one of the lists above), each prefixed with the table alias ``alias``."""
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


def span_from_row(row: Sequence[Any]) -> Span:
    # positional, with the kind looked up rather than constructed: this runs once per span read
    return Span(row[0], row[1], SPAN_KINDS[row[2]], row[3], row[4], _json.loads(row[5]), row[6], row[7], row[8],
                row[9], row[10])  # fmt: skip
