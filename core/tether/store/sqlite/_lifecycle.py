"""The statements of a rollout's life in the SQLite store (``tether.store.sqlite``), each run inside the caller's
transaction: claiming queued rollouts, ending an attempt (and queueing the rollout again or finishing it),
sweeping stale attempts, cancelling, inserting spans, and the lookups they share. Errors are the store's
(``NotFound``, ``InvalidTransition``, ``InvalidInput``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tether import _json
from tether.store._rows import ATTEMPT_COLS, ROLLOUT_COLS, attempt_from_row, qualified, rollout_from_row
from tether.store._stale import stale_reason, timed_out_span
from tether.store._validate import Ending
from tether.store.errors import InvalidInput, InvalidTransition, NotFound
from tether.store.sqlite._rows import NEXT_QUEUE_POS
from tether.types import Attempt, AttemptStatus, Rollout, RolloutStatus, new_id

# -- lookups ------------------------------------------------------------------------------------------------


def status_of(conn: sqlite3.Connection, rollout_id: str) -> RolloutStatus:
    row = conn.execute("SELECT status FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone()
    if row is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return RolloutStatus(row[0])


def rollout_of(conn: sqlite3.Connection, rollout_id: str) -> Rollout:
    row = conn.execute(f"SELECT {ROLLOUT_COLS} FROM rollouts WHERE rollout_id = ?", (rollout_id,)).fetchone()
    if row is None:
        raise NotFound(f"unknown rollout {rollout_id!r}")
    return rollout_from_row(row)


def rollouts_by_id(conn: sqlite3.Connection, ids: list[str]) -> list[Rollout]:
    rows = conn.execute(
        f"SELECT {ROLLOUT_COLS} FROM rollouts WHERE rollout_id IN (SELECT value FROM json_each(?)) ORDER BY seq",
        (_json.dumps(ids).decode(),),
    )
    by_id = {r.rollout_id: r for r in map(rollout_from_row, rows)}
    return [by_id[rid] for rid in ids]


def attempts_of(conn: sqlite3.Connection, rollout_ids: list[str]) -> list[Attempt]:
    rows = conn.execute(
        f"SELECT {ATTEMPT_COLS} FROM attempts WHERE rollout_id IN (SELECT value FROM json_each(?)) "
        "ORDER BY rollout_id, idx",
        (_json.dumps(rollout_ids).decode(),),
    )
    return [attempt_from_row(row) for row in rows]


def running_attempt(conn: sqlite3.Connection, attempt_id: str) -> str:
    """The rollout id of a running attempt; ``NotFound`` / ``InvalidTransition`` otherwise."""
    row = conn.execute("SELECT rollout_id, status FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
    if row is None:
        raise NotFound(f"unknown attempt {attempt_id!r}")
    if row[1] != AttemptStatus.RUNNING.value:
        raise InvalidTransition(f"attempt {attempt_id} is already {row[1]}")
    return str(row[0])


# -- changes ------------------------------------------------------------------------------------------------


def claim(conn: sqlite3.Connection, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
    """Hand the first ``limit`` queued rollouts to ``worker_id``, each with a new running attempt."""
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT rollout_id FROM rollouts WHERE queue_pos IS NOT NULL ORDER BY queue_pos LIMIT ?", (limit,)
        )
    ]
    if not ids:
        return []
    now = time.time()
    conn.executemany(
        "UPDATE rollouts SET status = 'running', queue_pos = NULL, attempt_count = attempt_count + 1 "
        "WHERE rollout_id = ?",
        [(rid,) for rid in ids],
    )
    rollouts = rollouts_by_id(conn, ids)
    attempts = [
        Attempt(
            attempt_id=new_id("at"), rollout_id=r.rollout_id, index=r.attempt_count, worker_id=worker_id,
            started_at=now, last_heartbeat_at=now,
        )
        for r in rollouts
    ]  # fmt: skip
    conn.executemany(
        "INSERT INTO attempts (attempt_id, rollout_id, idx, worker_id, status, started_at, "
        "last_heartbeat_at) VALUES (?, ?, ?, ?, 'running', ?, ?)",
        [(a.attempt_id, a.rollout_id, a.index, worker_id, now, now) for a in attempts],
    )
    return list(zip(rollouts, attempts, strict=True))


def end_attempt(conn: sqlite3.Connection, attempt_id: str, rollout_id: str, ending: Ending) -> None:
    """End a running attempt as ``ending`` says; its rollout succeeds, is queued again (attempts left) or fails."""
    now, status, error, output, reward = time.time(), ending.status, ending.error, ending.output, ending.reward
    conn.execute(
        "UPDATE attempts SET status = ?, finished_at = ?, error = ? WHERE attempt_id = ?",
        (status.value, now, error, attempt_id),
    )
    if status == AttemptStatus.SUCCEEDED:
        conn.execute(
            "UPDATE rollouts SET status = 'succeeded', output = ?, reward = ?, error = NULL, finished_at = ? "
            "WHERE rollout_id = ?",
            (output, reward, now, rollout_id),
        )
        return
    conn.execute(
        "UPDATE rollouts SET "
        f"queue_pos = CASE WHEN attempt_count < max_attempts THEN {NEXT_QUEUE_POS} END, "
        "status = CASE WHEN attempt_count < max_attempts THEN 'queued' ELSE 'failed' END, "
        "output = CASE WHEN attempt_count < max_attempts THEN output ELSE ? END, "
        "reward = CASE WHEN attempt_count < max_attempts THEN reward ELSE ? END, "
        "finished_at = CASE WHEN attempt_count < max_attempts THEN NULL ELSE ? END, "
        "error = ? WHERE rollout_id = ?",
        (output, reward, now, error, rollout_id),
    )


def sweep(conn: sqlite3.Connection, when: float) -> list[str]:
    """End as ``timeout`` every running attempt past its rollout's timeout or heartbeat limit at ``when``;
    returns their rollouts' ids."""
    affected = []
    rows = conn.execute(
        f"SELECT {qualified('r', ROLLOUT_COLS)}, {qualified('a', ATTEMPT_COLS)} "
        "FROM attempts a JOIN rollouts r ON r.rollout_id = a.rollout_id WHERE a.status = 'running' AND "
        "((r.timeout_s IS NOT NULL AND ? - a.started_at > r.timeout_s) OR "
        "(r.heartbeat_timeout_s IS NOT NULL AND ? - a.last_heartbeat_at > r.heartbeat_timeout_s)) "
        "ORDER BY a.started_at",
        (when, when),
    ).fetchall()
    for row in rows:
        rollout, attempt = rollout_from_row(row[:16]), attempt_from_row(row[16:])
        reason = stale_reason(rollout, attempt, when)
        if reason:
            end_attempt(conn, attempt.attempt_id, rollout.rollout_id, Ending(AttemptStatus.TIMEOUT, error=reason))
            affected.append(rollout.rollout_id)
    return affected


def cancel(conn: sqlite3.Connection, rollout_id: str) -> Rollout:
    """Cancel an unfinished rollout and its running attempt."""
    status = status_of(conn, rollout_id)
    if status.finished:
        raise InvalidTransition(f"rollout {rollout_id} is already {status.value}")
    now = time.time()
    conn.execute(
        "UPDATE attempts SET status = 'cancelled', finished_at = ? WHERE rollout_id = ? AND status = 'running'",
        (now, rollout_id),
    )
    conn.execute(
        "UPDATE rollouts SET status = 'cancelled', finished_at = ?, queue_pos = NULL WHERE rollout_id = ?",
        (now, rollout_id),
    )
    return rollout_of(conn, rollout_id)


def insert_spans(conn: sqlite3.Connection, rows: list[list[Any]], attempt_ids: list[str]) -> list[int]:
    """Insert span rows (``attempt_id, 0, rollout_id, ...``: each gets its attempt's next sequence number, which
    is written into it) of the attempts ``attempt_ids``; returns the sequence numbers, and counts the spans as
    a heartbeat of a running attempt."""
    found = {
        aid: [rid, next_seq, status, error]
        for aid, rid, next_seq, status, error in conn.execute(
            "SELECT attempt_id, rollout_id, next_seq, status, error FROM attempts "
            "WHERE attempt_id IN (SELECT value FROM json_each(?))",
            (_json.dumps(attempt_ids).decode(),),
        )
    }
    sequences: list[int] = []
    for row in rows:
        info = found.get(row[0])
        if info is None:
            raise InvalidInput(f"span {row[5]!r} names unknown attempt {row[0]!r}")
        if info[0] != row[2]:
            raise InvalidInput(f"span {row[5]!r}: attempt {row[0]} belongs to rollout {info[0]}, not {row[2]}")
        if info[2] == AttemptStatus.TIMEOUT.value:
            raise InvalidTransition(timed_out_span(str(row[5]), str(row[0]), info[3]))
        sequence = info[1]
        row[1] = sequence
        info[1] = sequence + 1
        sequences.append(sequence)
    conn.executemany(f"INSERT INTO spans VALUES ({', '.join('?' * 11)})", rows)
    now = time.time()
    conn.executemany(
        "UPDATE attempts SET next_seq = ?, "
        "last_heartbeat_at = CASE WHEN status = 'running' THEN ? ELSE last_heartbeat_at END "
        "WHERE attempt_id = ?",
        [(info[1], now, aid) for aid, info in found.items()],
    )
    return sequences
