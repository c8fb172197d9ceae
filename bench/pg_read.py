"""PostgreSQL read parts: where a cached ``get_spans`` of a 16-span rollout spends its time, against SQLite's.

Run: ``.venv/bin/python bench/pg_read.py [--reads 2000] [--rounds 3]`` (needs Debian's ``postgresql`` and
``tether[postgres]``: a throwaway server is started, as ``store.py`` does, and removed at the end).

Both stores get the same 64 rollouts of 16 LLM spans (``store.py``'s spans, one batch each); then each part is
timed ``--reads`` times in turn, ``--rounds`` rounds alternating, and printed as this process's CPU time and
the wall time per call (median of the rounds): the whole ``get_spans`` on each store, the PostgreSQL read in
each of its two orders (the copy of the cached spans made while the server answers the freshness check, or
after it: the store keeps whichever has been quicker lately, ``tether/store/postgres/_overlap.py``), and the parts
of the PostgreSQL read: asyncpg's ``SELECT 1`` on a connection of its own (the floor of any call), the store's
freshness check through its pool, the same statement on a bare connection, and thawing the 16 cached spans
(the copy SQLite's read makes too). Then the ratios of the PostgreSQL reads to SQLite's. CPU time leaves out
the server's; on a shared machine it is the steadier figure, wall time is what a caller waits.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from store import llm_span

from tether.store._frozen import thawed_span
from tether.store.postgres import PostgresStore
from tether.store.postgres._spans import NEXT_SEQ
from tether.store.sqlite import SqliteStore
from tether.testing.pg_server import TempPostgres
from tether.types import RolloutSpec

ROLLOUTS, SPANS = 64, 16


async def _fill(store: Any) -> list[str]:
    await store.enqueue([RolloutSpec(input={"i": i}) for i in range(ROLLOUTS)])
    claimed = await store.dequeue("bench", limit=ROLLOUTS)
    for k, (rollout, attempt) in enumerate(claimed):
        rid, aid = rollout.rollout_id, attempt.attempt_id
        await store.add_spans([llm_span(rid, aid, k * SPANS + j) for j in range(SPANS)])
    return [attempt.attempt_id for _, attempt in claimed]


async def _time(n: int, call: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    """(CPU ms, wall ms) per call: this process's CPU time, and the median wall time of one call."""
    walls = []
    cpu = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        walls.append(time.perf_counter() - t0)
    return (time.process_time() - cpu) / n * 1000, statistics.median(walls) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=2000, help="calls per part per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import asyncpg

    pg = TempPostgres().start()
    try:
        with tempfile.TemporaryDirectory(prefix="tether-pgread-") as tmp:
            sqlite = SqliteStore(Path(tmp) / "s.db")
            postgres = PostgresStore(pg.new_schema())
            bare = await asyncpg.connect(pg.url())
            bare_store = await asyncpg.connect(postgres.url)
            try:
                s_ids, p_ids = await _fill(sqlite), await _fill(postgres)
                cached = postgres._cache.spans_of(p_ids[0]) or {}
                parts: dict[str, Callable[[int], Awaitable[Any]]] = {
                    "sqlite get_spans": lambda i: sqlite.get_spans(s_ids[i % ROLLOUTS]),
                    "postgresql get_spans": lambda i: postgres.get_spans(p_ids[i % ROLLOUTS]),
                    "  copy during check": lambda i: _overlapped(postgres, p_ids[i % ROLLOUTS]),
                    "  check, then copy": lambda i: _one_after_the_other(postgres, p_ids[i % ROLLOUTS]),
                    "  SELECT 1 (bare)": lambda i: bare.fetchval("SELECT 1"),
                    "  next_seq (bare)": lambda i: bare_store.fetch(NEXT_SEQ, p_ids[i % ROLLOUTS]),
                    "  next_seq (pool)": lambda i: postgres._db.fetch(NEXT_SEQ, p_ids[i % ROLLOUTS]),
                    "  thaw 16 spans": lambda i: _thaw(cached),
                }
                for call in parts.values():  # warm: statements prepared, caches filled
                    for i in range(50):
                        await call(i)
                figures: dict[str, list[tuple[float, float]]] = {name: [] for name in parts}
                for _ in range(args.rounds):
                    for name, call in parts.items():
                        figures[name].append(await _time(args.reads, call))
            finally:
                await bare.close()
                await bare_store.close()
                await postgres.close()
                await sqlite.close()
    finally:
        pg.cleanup()
    print(f"python {sys.version.split()[0]}, {args.reads} calls x {args.rounds} rounds per part\n")
    print(f"{'part':<24} {'CPU ms/call':>12} {'wall p50 ms':>12}")
    med = {
        name: (statistics.median(c for c, _ in f), statistics.median(w for _, w in f))
        for name, f in figures.items()
    }
    for name, (cpu, wall) in med.items():
        print(f"{name:<24} {cpu:>12.4f} {wall:>12.4f}")
    s = med["sqlite get_spans"]
    print()
    for name in ("postgresql get_spans", "  copy during check", "  check, then copy"):
        p = med[name]
        print(f"{name.strip():<20} / sqlite get_spans: x{p[0] / s[0]:.2f} by CPU, x{p[1] / s[1]:.2f} by wall p50")


async def _overlapped(store: PostgresStore, attempt_id: str) -> list[Any]:
    """The cached read with the copy made while the server answers the check (``Connections.fetch_during``)."""
    cached = store._cache.spans_of(attempt_id) or {}
    rows, copies = await store._db.fetch_during(
        NEXT_SEQ, (attempt_id,), lambda: {seq: thawed_span(span) for seq, span in cached.items()}
    )
    assert all(seq in copies for seq in range(rows[0][0]))
    return [copies[seq] for seq in range(rows[0][0])]


async def _one_after_the_other(store: PostgresStore, attempt_id: str) -> list[Any]:
    """The cached read in the previous order: the freshness check's round trip, then the copy."""
    cached = store._cache.spans_of(attempt_id) or {}
    (row,) = await store._db.fetch(NEXT_SEQ, attempt_id)
    assert all(seq in cached for seq in range(row[0]))
    return [thawed_span(cached[seq]) for seq in range(row[0])]


async def _thaw(cached: dict[int, Any]) -> None:
    [thawed_span(cached[seq]) for seq in range(SPANS)]


if __name__ == "__main__":
    asyncio.run(main())
