"""The PostgreSQL store's reads and writes that are not a rollout's life (``tether.store.postgres``): its dialect
of the shared rollout statements (``tether.store._sql``), versioned resources, and taking finished rollouts out
for a harvest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether import _json
from tether.store._rows import ROLLOUT_COLS, SPAN_COLS, rollout_from_row, span_from_row
from tether.store._span_cache import SpanCache
from tether.store._sql import Dialect
from tether.store.base import Harvested
from tether.store.errors import InvalidTransition
from tether.store.postgres._ops import attempts_of, status_of
from tether.types import LLMEndpoint, PromptTemplate, Resources, Span

_FINISHED = ("succeeded", "failed", "cancelled")
_RESOURCES_LOCK = 0x7E7E_E13  # pg_advisory_xact_lock key: one new resources version at a time


#: how this store writes the statements of ``tether.store._sql`` (ids: one ``text[]`` argument)
POSTGRES = Dialect("tether_rollouts", lambda i: f"${i}", "rollout_id = ANY({}::text[])", list, like="ILIKE")


async def publish_resources(
    conn: Any, llm: LLMEndpoint | None, prompts: dict[str, PromptTemplate] | None
) -> Resources:
    """Add the next version of the resources (what is not given carried over), one writer at a time."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _RESOURCES_LOCK)
    row = await conn.fetchrow("SELECT data FROM tether_resources ORDER BY version DESC LIMIT 1")
    latest = Resources.from_dict(_json.loads(row[0])) if row else None
    resources = Resources(
        version=(latest.version + 1) if latest else 1,
        llm=llm if llm is not None else (latest.llm if latest else None),
        prompts=dict(prompts) if prompts is not None else (dict(latest.prompts) if latest else {}),
    )
    data = _json.dumps(resources.to_dict())
    await conn.execute("INSERT INTO tether_resources (version, data) VALUES ($1, $2)", resources.version, data)
    return Resources.from_dict(_json.loads(data))


async def take_finished(conn: Any, cache: SpanCache, rollout_ids: Sequence[str] | None) -> list[Harvested]:
    """Delete and return the finished rollouts named (all of them when ``None``), with their attempts and
    spans; refuses (``InvalidTransition``, ``NotFound``) before deleting anything."""
    if rollout_ids is None:
        ids = [
            row[0]
            for row in await conn.fetch(
                "SELECT rollout_id FROM tether_rollouts WHERE status = ANY($1::text[]) ORDER BY seq FOR UPDATE",
                list(_FINISHED),
            )
        ]
    else:
        ids = list(dict.fromkeys(rollout_ids))
        for rid in ids:
            status = await status_of(conn, rid, lock=True)
            if not status.finished:
                raise InvalidTransition(
                    f"rollout {rid} is {status.value}; only finished rollouts can be harvested"
                )
    if not ids:
        return []
    rows = await conn.fetch(
        f"DELETE FROM tether_rollouts WHERE rollout_id = ANY($1::text[]) RETURNING {ROLLOUT_COLS}", ids
    )
    by_id = {r.rollout_id: r for r in map(rollout_from_row, rows)}
    attempts = await attempts_of(conn, ids)
    span_rows = await conn.fetch(
        f"DELETE FROM tether_spans WHERE attempt_id = ANY($1::text[]) RETURNING {SPAN_COLS}",
        [a.attempt_id for a in attempts],
    )
    await conn.execute("DELETE FROM tether_attempts WHERE rollout_id = ANY($1::text[])", ids)
    cache.drop(a.attempt_id for a in attempts)
    spans_of: dict[str, list[Span]] = {a.attempt_id: [] for a in attempts}
    for span in sorted(map(span_from_row, span_rows), key=lambda s: s.sequence or 0):
        spans_of[span.attempt_id].append(span)
    out = []
    for rid in ids:
        mine = [a for a in attempts if a.rollout_id == rid]
        spans = [s for a in mine for s in spans_of[a.attempt_id]]
        out.append(Harvested(rollout=by_id[rid], attempts=mine, spans=spans))
    return out
