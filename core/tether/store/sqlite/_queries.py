"""The SQLite store's reads and writes that are not a rollout's life (``tether.store.sqlite``): its dialect of the
shared rollout statements (``tether.store._sql``), counting in a file aside, versioned resources, and taking
finished rollouts out for a harvest."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether import _json
from tether.store._span_cache import SpanCache
from tether.store._sql import Dialect
from tether.store.errors import InvalidInput, InvalidTransition
from tether.store.sqlite._lifecycle import attempts_of, rollouts_by_id, status_of
from tether.store.sqlite._rows import read_spans
from tether.types import Attempt, LLMEndpoint, PromptTemplate, Resources, Rollout, Span

#: how this store writes the statements of ``tether.store._sql`` (ids: a JSON array, read by ``json_each``)
SQLITE = Dialect(
    "rollouts",
    lambda _: "?",
    "rollout_id IN (SELECT value FROM json_each({}))",
    lambda ids: _json.dumps(ids).decode(),
)


def count_in_file(path: str, sql: str, args: list[Any]) -> list[Any]:
    """``sql`` on a read-only connection of its own to the file at ``path`` (for a worker thread)."""
    conn = sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True, timeout=30.0)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def latest_resources(conn: sqlite3.Connection) -> Resources | None:
    row = conn.execute("SELECT data FROM resources ORDER BY version DESC LIMIT 1").fetchone()
    return Resources.from_dict(_json.loads(row[0])) if row else None


def insert_resources(
    conn: sqlite3.Connection, llm: LLMEndpoint | None, prompts: dict[str, PromptTemplate] | None
) -> bytes:
    """Add the next version of the resources (what is not given carried over); its JSON as stored."""
    latest = latest_resources(conn)
    resources = Resources(
        version=latest.version + 1 if latest else 1,
        llm=llm if llm is not None else (latest.llm if latest else None),
        prompts=dict(prompts) if prompts is not None else (dict(latest.prompts) if latest else {}),
    )
    try:
        data = _json.dumps(resources.to_dict())
    except TypeError as exc:
        raise InvalidInput(f"resources: {exc}") from None
    conn.execute("INSERT INTO resources (version, data) VALUES (?, ?)", (resources.version, data))
    return data


def take_finished(
    conn: sqlite3.Connection, cache: SpanCache, rollout_ids: Sequence[str] | None
) -> tuple[list[Rollout], list[Attempt], dict[str, list[Span]]]:
    """Read and delete the finished rollouts named (all of them when ``None``), with their attempts and each
    attempt's spans; refuses (``InvalidTransition``, ``NotFound``) before deleting anything."""
    if rollout_ids is None:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT rollout_id FROM rollouts WHERE status IN ('succeeded', 'failed', 'cancelled') ORDER BY seq"
            )
        ]
    else:
        ids = list(dict.fromkeys(rollout_ids))
        for rid in ids:
            status = status_of(conn, rid)
            if not status.finished:
                raise InvalidTransition(
                    f"rollout {rid} is {status.value}; only finished rollouts can be harvested"
                )
    if not ids:
        return [], [], {}
    rollouts = rollouts_by_id(conn, ids)
    attempts = attempts_of(conn, ids)
    spans_of = {a.attempt_id: read_spans(conn, cache, a.attempt_id, 0) or [] for a in attempts}
    conn.executemany("DELETE FROM spans WHERE attempt_id = ?", [(a.attempt_id,) for a in attempts])
    conn.executemany("DELETE FROM attempts WHERE rollout_id = ?", [(rid,) for rid in ids])
    conn.executemany("DELETE FROM rollouts WHERE rollout_id = ?", [(rid,) for rid in ids])
    return rollouts, attempts, spans_of
