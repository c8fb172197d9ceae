"""Store benchmark: throughput and latency of each backend on the calls a training run makes.

Run: ``.venv/bin/python bench/store.py [--quick] [--backends memory,sqlite,http+memory,http+sqlite,postgresql]``
(``http+sqlite-nocache``: the SQLite server with its span cache off, the baseline of the memory figures)

Workloads (each on a fresh store): enqueue (1 rollout a call), dequeue (1 a call), add_span with LLM-sized
spans one per call and in batches of 100, get_spans of a 20-span attempt, the full rollout lifecycle
(enqueue -> dequeue -> add 3 LLM spans in one batch -> finish) at 1 and 16 concurrent workers (asyncio
tasks), and reading rollouts back as training does: write N rollouts of 16 LLM spans (one batch each), then
get_spans of every one (three passes), with the read/write ratio; for memory and sqlite also through the
previous read path (``bench/_previous_read.py``) on the same store, and for sqlite (postgresql) from a second
store opened on the same file (database): nothing cached, every span decoded, as another process reads them.
For ``http+X`` the store server runs in a separate process over an ``X`` store, as remote runners would see
it. When ``agentlightning`` is importable (an optional comparison, never a dependency) the same workload also
runs against its in-memory store and the ratios are printed (``_AglStore`` in ``bench/_store_backends.py``).
``postgresql`` (and ``http+postgresql``) run against a throwaway local server (``tether.testing.pg_server``:
initdb into a temp dir, ``fsync=off``; needs Debian's ``postgresql`` and ``tether[postgres]``), a fresh
schema per workload; its ratios to SQLite are printed under the table. Each fresh store is opened (one call:
a new PostgreSQL schema is created then) before its workload is timed. With PostgreSQL, the last row is the
floor of any call: the round trip of asyncpg's ``SELECT 1`` on a connection of its own.
Prints one table: ops/s, p50 and p99 latency of one call (of one whole rollout for the lifecycle), then the
store server's peak RSS in each workload group (``http+`` backends), against the server without span cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from _store_backends import _agl_factory, _factory, _http_available, print_server_memory
from _store_workload import READ_SPANS, Result, bench_backend, round_trip_floor


def print_table(results: list[Result]) -> None:
    header = f"{'backend':<14} {'workload':<16} {'calls':>7} {'rate':>19} {'p50 ms':>9} {'p99 ms':>9}"
    print(header)
    print("-" * len(header))
    for r in results:
        rate = f"{r.rate:,.0f} {r.unit}/s"
        print(f"{r.backend:<14} {r.workload:<16} {r.ops:>7} {rate:>19} {r.pct(0.5):>9.2f} {r.pct(0.99):>9.2f}")


def print_read_ratios(results: list[Result]) -> None:
    """Per backend: reading 16-span rollouts against writing them, and against the previous read path; by
    wall clock, and (in-process backends) by this process's CPU time, which a shared machine disturbs less."""
    by = {(r.backend, r.workload): r for r in results}
    lines = []
    for r in results:
        if r.workload != "read 16-span":
            continue
        for label, rate in (("wall", lambda x: x.rate), ("cpu", lambda x: x.cpu_rate)):
            own = rate(r)
            if own is None:
                continue
            parts = [f"x{own / rate(by[(r.backend, 'write 16-span')]):,.1f} of writes"]
            for other in ("read (previous)", "read (from file)", "read (other store)"):
                if (r.backend, other) in by and rate(by[(r.backend, other)]):
                    parts.append(f"x{own / rate(by[(r.backend, other)]):,.1f} of {other[6:-1]} reads")
            lines.append(f"  {r.backend:<14} {label:<5} {own:>9,.0f} rollouts/s: " + ", ".join(parts))
    if lines:
        print(f"\nreading {READ_SPANS}-span rollouts (get_spans), same run:")
        print("\n".join(lines))


def print_ratios(results: list[Result], baseline: str) -> None:
    base = {r.workload: r for r in results if r.backend == baseline}
    print(f"\nthroughput ratio against {baseline} (higher is better for tether), and p50 latency against its:")
    for r in results:
        if not r.backend.startswith("agl") and r.workload in base:
            rate, p50 = r.rate / base[r.workload].rate, r.pct(0.5) / base[r.workload].pct(0.5)
            print(f"  {r.backend:<14} {r.workload:<16} x{rate:,.1f}   p50 x{p50:,.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in a few seconds")
    parser.add_argument("--backends", default="memory,sqlite,http+memory,http+sqlite")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the sizes (0.5: half scale)")
    args = parser.parse_args()
    sizes = {"calls": 2000, "batches": 50, "queries": 400, "rollouts": 400, "read_rollouts": 256, "read_passes": 3}
    if args.quick:
        sizes = {"calls": 200, "batches": 5, "queries": 50, "rollouts": 64, "read_rollouts": 32, "read_passes": 2}
    sizes = {key: max(1, round(value * args.scale)) for key, value in sizes.items()}
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if note := _http_available():
        print(note)
        backends = [b for b in backends if not b.startswith("http+")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, sizes {sizes}\n")
    pg = None
    if any(b.endswith("postgresql") for b in backends):
        from tether.testing.pg_server import TempPostgres

        pg = TempPostgres().start()
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
            for backend in backends:
                results += await bench_backend(backend, _factory(backend, Path(tmp), pg), sizes)
            if pg is not None:
                results.append(await round_trip_floor(pg.url(), sizes["queries"] * 5))
    finally:
        if pg is not None:
            pg.cleanup()
    agl_results: list[Result] = []
    try:
        import agentlightning  # noqa: F401
    except ImportError:
        print("agentlightning is not installed: no comparison (pip install agentlightning==0.3.0 to add one)\n")
    else:
        import logging

        logging.getLogger("agentlightning").setLevel(logging.ERROR)
        for mode in ("memory", "http"):
            agl_results += await bench_backend(f"agl {mode}", _agl_factory(mode), sizes)
    print_table(results + agl_results)
    print_read_ratios(results + agl_results)
    print_server_memory()
    if pg is not None and any(r.backend == "sqlite" for r in results):
        print_ratios([r for r in results if "postgresql" in r.backend or r.backend == "sqlite"], "sqlite")
    if agl_results:  # in-process backends against its memory store, HTTP ones against its HTTP store
        print_ratios([r for r in results if not r.backend.startswith("http")] + agl_results, "agl memory")
        print_ratios([r for r in results if r.backend.startswith("http")] + agl_results, "agl http")


if __name__ == "__main__":
    asyncio.run(main())
