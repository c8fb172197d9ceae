"""The stores' read path before issue 15 (item 12), kept callable so ``store.py`` can time it in the same run.

Before, the memory store deep-copied every span it returned through JSON (``Span.from_dict(s.to_dict())``
plus ``orjson.loads(orjson.dumps(attributes))``), and the SQLite store decoded every span's row from the
file (keyword ``Span(...)``, ``SpanKind(...)``, ``orjson.loads`` of the attributes). Both are reproduced here
on the same store the bench wrote, so the old and the new path read the same spans.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tether import _json
from tether.store.errors import NotFound
from tether.store.memory import MemoryStore
from tether.store.sqlite import SqliteStore
from tether.types import Span, SpanKind

Reader = Callable[[str], Awaitable[list[Span]]]


def previous_reader(store: Any) -> Reader | None:
    """The previous ``get_spans`` over ``store``'s current contents, or None for a backend it did not cover."""
    if isinstance(store, MemoryStore):
        return _memory(store)
    if isinstance(store, SqliteStore):
        return _sqlite(store)
    return None


def _memory(store: MemoryStore) -> Reader:
    # the previous memory store held plain (JSON-cloned) attributes: rebuild that state once, untimed
    plain = {aid: [_thawed(s) for s in spans] for aid, spans in store._spans.items()}
    lock = store._lock

    async def get_spans(attempt_id: str, since: int = 0) -> list[Span]:
        with lock:
            if attempt_id not in plain:
                raise NotFound(f"unknown attempt {attempt_id!r}")
            return [_copy_span(s) for s in plain[attempt_id][max(since, 0) :]]

    return get_spans


def _thawed(span: Span) -> Span:
    from tether.store._frozen import thaw

    return Span.from_dict({**span.to_dict(), "attributes": thaw(span.attributes)})


def _copy_span(s: Span) -> Span:
    out = Span.from_dict(s.to_dict())
    out.attributes = _json.clone(s.attributes)
    return out


_SPAN_COLS = (
    "rollout_id, attempt_id, kind, name, agent_name, attributes, span_id, parent_id, start_time, end_time, "
    "sequence"
)


def _sqlite(store: SqliteStore) -> Reader:
    async def get_spans(attempt_id: str, since: int = 0) -> list[Span]:
        with store._tx(write=False) as conn:
            if conn.execute("SELECT 1 FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone() is None:
                raise NotFound(f"unknown attempt {attempt_id!r}")
            rows = conn.execute(
                f"SELECT {_SPAN_COLS} FROM spans WHERE attempt_id = ? AND sequence >= ? ORDER BY sequence",
                (attempt_id, since),
            ).fetchall()
        return [_span_from_row(row) for row in rows]

    return get_spans


def _span_from_row(row: Any) -> Span:
    return Span(
        rollout_id=row[0], attempt_id=row[1], kind=SpanKind(row[2]), name=row[3], agent_name=row[4],
        attributes=_json.loads(row[5]), span_id=row[6], parent_id=row[7], start_time=row[8], end_time=row[9],
        sequence=row[10],
    )  # fmt: skip


__all__ = ["Reader", "previous_reader"]
