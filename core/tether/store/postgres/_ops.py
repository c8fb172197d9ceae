"""The PostgreSQL store's steps inside a transaction (``tether.store.postgres``).

Every change to a rollout locks its row first (``status_of(lock=True)``, ``lock_running_attempt``), then its
attempts', so that finishing, cancelling and the stale sweep never interleave on one rollout and never
deadlock each other. Numbers are checked before anything is sent, by the stores' shared ``validate_int`` and
``validate_number`` (``tether.store.base``).
"""

from __future__ import annotations

import time
from typing import Any

from tether.store._rows import ATTEMPT_COLS, ROLLOUT_COLS, attempt_from_row, qualified, rollout_from_row
from tether.store._stale import stale_reason
from tether.store._validate import Ending
from tether.store.errors import InvalidTransition, NotFound
from tether.types import Attempt, AttemptStatus, Rollout, RolloutStatus, new_id

#: claim up to $1 queued rollouts in queue order (skipping those other workers hold), mark them running and
#: insert their attempts (ids $2, in queue order, of worker $3 at $4): one statement, atomic on its own
CLAIM_QUEUED = (
    "WITH picked AS (SELECT rollout_id, queue_pos FROM tether_rollouts WHERE queue_pos IS NOT NULL "
    "ORDER BY queue_pos LIMIT $1 FOR UPDATE SKIP LOCKED), "
    "claimed AS (UPDATE tether_rollouts r SET status = 'running', queue_pos = NULL, "
    "attempt_count = r.attempt_count + 1 FROM picked WHERE r.rollout_id = picked.rollout_id "
    f"RETURNING {qualified('r', ROLLOUT_COLS)}, picked.queue_pos), "
    "inserted AS (INSERT INTO tether_attempts (attempt_id, rollout_id, idx, worker_id, status, "
    "started_at, last_heartbeat_at) SELECT ($2::text[])[row_number() OVER (ORDER BY queue_pos)], "
    "rollout_id, attempt_count, $3, 'running', $4, $4 FROM claimed) "
    "SELECT * FROM claimed ORDER BY queue_pos"
)
#: ``tether_finish_attempt`` and ``tether_add_spans`` (``tether.store.postgres._schema``): one statement each
FINISH_ATTEMPT = f"SELECT {ROLLOUT_COLS} FROM tether_finish_attempt($1, $2, $3, $4, $5, $6)"
ADD_SPANS = "SELECT tether_add_spans($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
ROLLOUT_BY_ID = f"SELECT {ROLLOUT_COLS} FROM tether_rollouts WHERE rollout_id = $1"


async def status_of(conn: Any, rollout_id: str, *, lock: bool = False) -> RolloutStatus:
    sql = "SELECT status FROM tether_rollouts WHERE rollout_id = $1" + (" FOR UPDATE" if lock else "")
    status = await conn.fetchval(sql, rollout_id)
    if status is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return RolloutStatus(status)


async def rollout_of(conn: Any, rollout_id: str) -> Rollout:
    row = await conn.fetchrow(ROLLOUT_BY_ID, rollout_id)
    if row is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return rollout_from_row(row)


async def attempts_of(conn: Any, rollout_ids: list[str]) -> list[Attempt]:
    rows = await conn.fetch(
        f"SELECT {ATTEMPT_COLS} FROM tether_attempts WHERE rollout_id = ANY($1::text[]) ORDER BY rollout_id, idx",
        rollout_ids,
    )
    return [attempt_from_row(row) for row in rows]


async def claim_queued(conn: Any, worker_id: str, limit: int, now: float) -> list[tuple[Rollout, Attempt]]:
    """Claim up to ``limit`` queued rollouts (``CLAIM_QUEUED``) as ``worker_id``'s attempts."""
    ids = [new_id("at") for _ in range(limit)]  # the k-th rollout claimed, in queue order, gets ids[k]
    rows = await conn.fetch(CLAIM_QUEUED, limit, ids, worker_id, now)
    out = []
    for row, attempt_id in zip(rows, ids, strict=False):
        rollout = rollout_from_row(row)
        attempt = Attempt(
            attempt_id=attempt_id, rollout_id=rollout.rollout_id, index=rollout.attempt_count, worker_id=worker_id,
            started_at=now, last_heartbeat_at=now,
        )  # fmt: skip
        out.append((rollout, attempt))
    return out


async def lock_running_attempt(conn: Any, attempt_id: str) -> str:
    """Lock the rollout of a running attempt (rollout first, as everywhere) and return its id;
    ``NotFound`` / ``InvalidTransition`` otherwise."""
    rollout_id = await conn.fetchval(  # one round trip: find the rollout and lock it
        "SELECT rollout_id FROM tether_rollouts WHERE rollout_id = "
        "(SELECT rollout_id FROM tether_attempts WHERE attempt_id = $1) FOR UPDATE",
        attempt_id,
    )
    if rollout_id is None:
        raise NotFound(f"unknown attempt {attempt_id!r}")
    # read after the lock: a change committed while we waited for it counts
    status = await conn.fetchval("SELECT status FROM tether_attempts WHERE attempt_id = $1", attempt_id)
    if status != AttemptStatus.RUNNING.value:
        raise InvalidTransition(f"attempt {attempt_id} is already {status}")
    return str(rollout_id)


async def end_attempt(conn: Any, attempt_id: str, rollout_id: str, ending: Ending) -> Rollout:
    """End a running attempt (its rollout locked) as ``ending`` says and settle its rollout; the rollout as it
    is now."""
    now, status, error, output, reward = time.time(), ending.status, ending.error, ending.output, ending.reward
    await conn.execute(
        "UPDATE tether_attempts SET status = $2, finished_at = $3, error = $4 WHERE attempt_id = $1",
        attempt_id,
        status.value,
        now,
        error,
    )
    if status == AttemptStatus.SUCCEEDED:
        row = await conn.fetchrow(
            "UPDATE tether_rollouts SET status = 'succeeded', output = $2, reward = $3, error = NULL, "
            f"finished_at = $4 WHERE rollout_id = $1 RETURNING {ROLLOUT_COLS}",
            rollout_id,
            output,
            reward,
            now,
        )
        return rollout_from_row(row)
    row = await conn.fetchrow(
        "UPDATE tether_rollouts SET "
        "queue_pos = CASE WHEN attempt_count < max_attempts THEN nextval('tether_queue_pos') END, "
        "status = CASE WHEN attempt_count < max_attempts THEN 'queued' ELSE 'failed' END, "
        "output = CASE WHEN attempt_count < max_attempts THEN output ELSE $2::bytea END, "
        "reward = CASE WHEN attempt_count < max_attempts THEN reward ELSE $3::float8 END, "
        "finished_at = CASE WHEN attempt_count < max_attempts THEN NULL ELSE $4::float8 END, "
        f"error = $5 WHERE rollout_id = $1 RETURNING {ROLLOUT_COLS}",
        rollout_id,
        output,
        reward,
        now,
        error,
    )
    return rollout_from_row(row)


def opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


async def sweep_stale(conn: Any, when: float) -> list[str]:
    """Time out every running attempt past its rollout's timeout or heartbeat timeout at ``when``; the ids of
    the rollouts that changed."""
    rows = await conn.fetch(
        f"SELECT {qualified('r', ROLLOUT_COLS)}, {qualified('a', ATTEMPT_COLS)} "
        "FROM tether_attempts a JOIN tether_rollouts r ON r.rollout_id = a.rollout_id "
        "WHERE a.status = 'running' AND "
        "((r.timeout_s IS NOT NULL AND $1 - a.started_at > r.timeout_s) OR "
        "(r.heartbeat_timeout_s IS NOT NULL AND $1 - a.last_heartbeat_at > r.heartbeat_timeout_s)) "
        "ORDER BY a.started_at FOR UPDATE OF r",
        when,
    )
    affected = []
    for row in rows:
        rollout, attempt = rollout_from_row(row[:16]), attempt_from_row(row[16:])
        current = await conn.fetchrow(  # the rollout is locked: its attempt's status is now stable
            "SELECT status, last_heartbeat_at FROM tether_attempts WHERE attempt_id = $1",
            attempt.attempt_id,
        )
        if current is None or current[0] != AttemptStatus.RUNNING.value:
            continue
        attempt.last_heartbeat_at = current[1]
        reason = stale_reason(rollout, attempt, when)
        if reason:
            await end_attempt(
                conn, attempt.attempt_id, rollout.rollout_id, Ending(AttemptStatus.TIMEOUT, error=reason)
            )
            affected.append(rollout.rollout_id)
    return affected


async def cancel(conn: Any, rollout_id: str) -> Rollout:
    """Cancel a rollout that has not finished, and its running attempt if it has one."""
    status = await status_of(conn, rollout_id, lock=True)
    if status.finished:
        raise InvalidTransition(f"rollout {rollout_id} is already {status.value}")
    now = time.time()
    await conn.execute(
        "UPDATE tether_attempts SET status = 'cancelled', finished_at = $2 "
        "WHERE rollout_id = $1 AND status = 'running'",
        rollout_id,
        now,
    )
    await conn.execute(
        "UPDATE tether_rollouts SET status = 'cancelled', finished_at = $2, queue_pos = NULL "
        "WHERE rollout_id = $1",
        rollout_id,
        now,
    )
    return await rollout_of(conn, rollout_id)
