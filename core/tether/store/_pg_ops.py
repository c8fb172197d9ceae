"""The PostgreSQL store's steps inside a transaction (``tether.store.postgres``), and its checks of numbers.

Every change to a rollout locks its row first (``status_of(lock=True)``, ``lock_running_attempt``), then its
attempts', so that finishing, cancelling and the stale sweep never interleave on one rollout and never
deadlock each other. ``int64``/``finite`` refuse what a ``bigint``/``double precision`` cannot hold with
``InvalidInput``, before anything is sent.
"""

from __future__ import annotations

import math
import time
from typing import Any

from tether.store._pg_schema import ATTEMPT_COLS, ROLLOUT_COLS, attempt_from_row, rollout_from_row
from tether.store.base import InvalidInput, InvalidTransition, NotFound
from tether.types import Attempt, AttemptStatus, Rollout, RolloutStatus


async def status_of(conn: Any, rollout_id: str, *, lock: bool = False) -> RolloutStatus:
    sql = "SELECT status FROM tether_rollouts WHERE rollout_id = $1" + (" FOR UPDATE" if lock else "")
    status = await conn.fetchval(sql, rollout_id)
    if status is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return RolloutStatus(status)


async def rollout_of(conn: Any, rollout_id: str) -> Rollout:
    row = await conn.fetchrow(f"SELECT {ROLLOUT_COLS} FROM tether_rollouts WHERE rollout_id = $1", rollout_id)
    if row is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return rollout_from_row(row)


async def attempts_of(conn: Any, rollout_ids: list[str]) -> list[Attempt]:
    rows = await conn.fetch(
        f"SELECT {ATTEMPT_COLS} FROM tether_attempts WHERE rollout_id = ANY($1::text[]) ORDER BY rollout_id, idx",
        rollout_ids,
    )
    return [attempt_from_row(row) for row in rows]


async def lock_running_attempt(conn: Any, attempt_id: str) -> str:
    """Lock the rollout of a running attempt (rollout first, as everywhere) and return its id;
    ``NotFound`` / ``InvalidTransition`` otherwise."""
    rollout_id = await conn.fetchval("SELECT rollout_id FROM tether_attempts WHERE attempt_id = $1", attempt_id)
    if rollout_id is None:
        raise NotFound(f"unknown attempt {attempt_id!r}")
    await conn.execute("SELECT 1 FROM tether_rollouts WHERE rollout_id = $1 FOR UPDATE", rollout_id)
    status = await conn.fetchval("SELECT status FROM tether_attempts WHERE attempt_id = $1", attempt_id)
    if status != AttemptStatus.RUNNING.value:
        raise InvalidTransition(f"attempt {attempt_id} is already {status}")
    return str(rollout_id)


async def end_attempt(
    conn: Any,
    attempt_id: str,
    rollout_id: str,
    status: AttemptStatus,
    error: str | None,
    output: bytes | None,
    reward: float | None,
) -> None:
    now = time.time()
    await conn.execute(
        "UPDATE tether_attempts SET status = $2, finished_at = $3, error = $4 WHERE attempt_id = $1",
        attempt_id,
        status.value,
        now,
        error,
    )
    if status == AttemptStatus.SUCCEEDED:
        await conn.execute(
            "UPDATE tether_rollouts SET status = 'succeeded', output = $2, reward = $3, error = NULL, "
            "finished_at = $4 WHERE rollout_id = $1",
            rollout_id,
            output,
            reward,
            now,
        )
        return
    await conn.execute(
        "UPDATE tether_rollouts SET "
        "queue_pos = CASE WHEN attempt_count < max_attempts THEN nextval('tether_queue_pos') END, "
        "status = CASE WHEN attempt_count < max_attempts THEN 'queued' ELSE 'failed' END, "
        "output = CASE WHEN attempt_count < max_attempts THEN output ELSE $2::bytea END, "
        "reward = CASE WHEN attempt_count < max_attempts THEN reward ELSE $3::float8 END, "
        "finished_at = CASE WHEN attempt_count < max_attempts THEN NULL ELSE $4::float8 END, "
        "error = $5 WHERE rollout_id = $1",
        rollout_id,
        output,
        reward,
        now,
        error,
    )


def int64(value: Any, name: str, low: int = -(2**63)) -> int:
    """``value`` if it is an int (not a bool) in ``[low, 2**63 - 1]`` (a ``bigint``); else ``InvalidInput``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if not low <= value <= 2**63 - 1:
        raise InvalidInput(f"{name} must be between {low} and {2**63 - 1}, got {str(value)[:30]}")
    return value


def finite(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite int or float (not a bool); else ``InvalidInput``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidInput(f"{name} must be a finite number, got {str(value)[:30]}")
    return number


def opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)
