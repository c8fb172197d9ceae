"""The PostgreSQL store's span reads (``tether.store.postgres``): thawed from its cache when it can.

Reading a rollout's spans back is most of what training asks of a store, and decoding each LLM span's JSON
(hundreds of token ids) is most of what such a read costs; three round trips (``BEGIN``, ``SELECT``,
``COMMIT``) were the rest. So the store keeps the spans it committed in a ``SpanCache``, as the SQLite store
does, and a read is one statement: the attempt's ``next_seq`` (a batch's rows and its ``next_seq`` commit
together, so every sequence below it exists) when the cache holds the attempt, the rows otherwise. The
database stays the truth: spans another process wrote, or the cache evicted, are read and decoded.

The check's round trip is the one cost such a read has beyond SQLite's (which asks its file the same
question in microseconds), so the copy of the cached spans is made while the server answers
(``Connections.fetch_during``): with a core free for the server the read costs about the longer of the two
rather than their sum (``tether.store.postgres._overlap``: when that is slower, ``ReadOrder`` goes back to check,
then copy). The copy is kept only when the answer says the cache held every span (it is made of a snapshot
of the cache taken before the check was sent, so every span in it is below the ``next_seq`` the check sees).
"""

from __future__ import annotations

import time

from tether.store._frozen import thawed_span
from tether.store._rows import SPAN_COLS, qualified, span_from_row
from tether.store._span_cache import SpanCache
from tether.store.postgres._conn import Connections
from tether.store.postgres._overlap import ReadOrder
from tether.types import Span

__all__ = ["NEXT_SEQ", "SPANS_FROM", "read_spans"]

NEXT_SEQ = "SELECT next_seq FROM tether_attempts WHERE attempt_id = $1"
#: the attempt joined to its spans from sequence $2 on (a row of NULL span columns when it has none; no row when
#: the attempt is unknown)
SPANS_FROM = (
    f"SELECT {qualified('s', SPAN_COLS)} FROM tether_attempts a LEFT JOIN tether_spans s "
    "ON s.attempt_id = a.attempt_id AND s.sequence >= $2 WHERE a.attempt_id = $1 ORDER BY s.sequence"
)


async def read_spans(
    db: Connections, cache: SpanCache, attempt_id: str, since: int, order: ReadOrder
) -> list[Span] | None:
    """The attempt's spans from ``since`` on, in order; None when the attempt is unknown."""
    cached = cache.spans_of(attempt_id)
    copies: dict[int, Span] = {}
    if cached is not None:
        first = max(since, 0)

        def copy() -> dict[int, Span]:
            return {seq: thawed_span(span) for seq, span in cached.items() if seq >= first}

        start = time.perf_counter()
        overlap = order.overlap_next()
        if overlap:  # copied while the server looks up next_seq
            found, copies = await db.fetch_during(NEXT_SEQ, (attempt_id,), copy)
        else:
            found = await db.fetch(NEXT_SEQ, attempt_id)
            copies = copy() if found else {}
        if not found:
            return None
        wanted = range(first, found[0][0])
        if all(seq in copies for seq in wanted):
            spans = [copies[seq] for seq in wanted]
            order.record(overlap, time.perf_counter() - start)
            return spans
    # none cached, or some written by another process, or evicted: one statement
    joined = await db.fetch(SPANS_FROM, attempt_id, since)
    if not joined:
        return None
    rows = [row for row in joined if row[0] is not None]
    if not copies:
        return [span_from_row(row) for row in rows]
    return [copies[row[10]] if row[10] in copies else span_from_row(row) for row in rows]
