"""The dashboard's rollout pages on large SQLite and PostgreSQL stores: how long one page takes over HTTP.

For each backend and store size: the first page (a dashboard that just started: it starts counting the
rollouts by status, reads one page meanwhile, then waits for the count until 0.15 s from the start), how long
until a page carries the counts, the next page (continuing from the first page's cursor), the last page (past
the middle: read as a first page of the reverse order), the first page of each filter (status, reward range,
search) and of the reward order. Each is one request, the first of its page (the rows' sub-agents and
durations not yet read: what a click costs), except "first page again" (the median of 5 repeats).
The baseline is what the first page used to cost: one full ``list_rollouts()`` (the old dashboard read the
whole store to build its index before it served a page), timed in the same run up to ``--baseline-max``
rollouts (a million rollouts decoded at once would take gigabytes). Prints milliseconds, the ratio of each
first page to that baseline, and the load average.

The stores are filled by bulk inserts into the store's own tables (the store API would take minutes per
100,000 rollouts): 85 % succeeded with a reward, 10 % failed, the rest queued or running; 10 % val; 997
tasks; one attempt per started rollout. PostgreSQL: a throwaway server (``tether.testing.pg_server``: Debian's
``postgresql``, ``fsync=off``) and ``VACUUM ANALYZE`` after the fill, as autovacuum would leave a table.

    .venv/bin/python bench/dashboard.py                                  # 1e5 and 1e6, sqlite and postgresql
    .venv/bin/python bench/dashboard.py --sizes 10000 --backends sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from tether import _json
from tether.dashboard.server import start_dashboard
from tether.dashboard.sources import Sources
from tether.store import open_store

PAGE = 50


def _rows(n: int) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
    """(rollout row, attempt row or None) in the column order of both backends' tables."""
    rng = random.Random(0)
    start = time.time() - n
    for i in range(n):
        rid, created = f"ro-{i:012x}", start + i
        draw = rng.random()
        if draw < 0.85:
            status, reward, error, finished = "succeeded", round(rng.random(), 3), None, created + 2
        elif draw < 0.95:
            status, reward, error, finished = "failed", None, "Traceback ...\nValueError: boom", created + 2
        elif draw < 0.98:
            status, reward, error, finished = "queued", None, None, None
        else:
            status, reward, error, finished = "running", None, None, None
        mode = "val" if rng.random() < 0.1 else "train"
        rollout = (rid, _json.dumps({"question": f"what is {i} + 1?"}), f"task-{i % 997}", mode, status,
                   b"{}", 3, None, 300.0, i // 5000, 0 if status == "queued" else 1, created, finished,
                   None if finished is None else _json.dumps({"answer": i + 1}), reward, error,
                   i if status == "queued" else None)  # fmt: skip
        attempt = None
        if status != "queued":
            attempt = (f"at-{i:012x}", rid, 0, "bench", status, created + 1, created + 1, finished, error)
        yield rollout, attempt


_R_COLS = (
    "rollout_id, input, task_id, mode, status, metadata, max_attempts, timeout_s, heartbeat_timeout_s, "
    "resources_version, attempt_count, created_at, finished_at, output, reward, error, queue_pos"
)
_A_COLS = "attempt_id, rollout_id, idx, worker_id, status, started_at, last_heartbeat_at, finished_at, error"


async def fill_sqlite(path: Path, n: int) -> str:
    url = f"sqlite:///{path}"
    await open_store(url).close()  # the schema, with its indexes
    conn = sqlite3.connect(path)
    conn.execute("BEGIN")
    batch: list[Any] = []
    attempts: list[Any] = []
    for rollout, attempt in _rows(n):
        batch.append(rollout)
        if attempt is not None:
            attempts.append(attempt)
        if len(batch) >= 50_000:
            conn.executemany(f"INSERT INTO rollouts ({_R_COLS}) VALUES ({','.join('?' * 17)})", batch)
            conn.executemany(f"INSERT INTO attempts ({_A_COLS}) VALUES ({','.join('?' * 9)})", attempts)
            batch, attempts = [], []
    conn.executemany(f"INSERT INTO rollouts ({_R_COLS}) VALUES ({','.join('?' * 17)})", batch)
    conn.executemany(f"INSERT INTO attempts ({_A_COLS}) VALUES ({','.join('?' * 9)})", attempts)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    return url


async def fill_postgres(url: str, n: int) -> str:
    import asyncpg

    store = open_store(url)  # the schema (migrated on first use)
    await store.count_rollouts()
    await store.close()
    conn = await asyncpg.connect(url)
    try:
        batch: list[Any] = []
        attempts: list[Any] = []
        columns = [c.strip() for c in _R_COLS.split(",")]
        a_columns = [c.strip() for c in _A_COLS.split(",")]
        for rollout, attempt in _rows(n):
            batch.append(rollout)
            if attempt is not None:
                attempts.append(attempt)
            if len(batch) >= 50_000:
                await conn.copy_records_to_table("tether_rollouts", records=batch, columns=columns)
                await conn.copy_records_to_table("tether_attempts", records=attempts, columns=a_columns)
                batch, attempts = [], []
        if batch:
            await conn.copy_records_to_table("tether_rollouts", records=batch, columns=columns)
            await conn.copy_records_to_table("tether_attempts", records=attempts, columns=a_columns)
        await conn.execute("VACUUM ANALYZE tether_rollouts")
        await conn.execute("VACUUM ANALYZE tether_attempts")
    finally:
        await conn.close()
    return url


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    async with session.get(url) as response:
        body = await response.read()
        assert response.status == 200, body[:300]
    return (time.perf_counter() - started) * 1000, _json.loads(body)


async def _once(session: aiohttp.ClientSession, url: str) -> float:
    return (await _get(session, url))[0]


async def _median(session: aiohttp.ClientSession, url: str, repeat: int = 5) -> float:
    return statistics.median([(await _get(session, url))[0] for _ in range(repeat)])


async def measure(url: str, n: int, baseline_max: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    if n <= baseline_max:
        store = open_store(url)
        try:
            started = time.perf_counter()
            await store.list_rollouts()
            out["baseline: list_rollouts()"] = (time.perf_counter() - started) * 1000
        finally:
            await store.close()
    else:
        out["baseline: list_rollouts()"] = None
    server = await start_dashboard(Sources(url, None))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{server.url}api/sources") as response:  # (its name hides a password)
                name = (await response.json())["sources"][0]["name"]
            api = f"{server.url}api/rollouts?source={quote(name, safe='')}&limit={PAGE}"
            started = time.perf_counter()
            out["first page (cold)"], first = await _get(session, api)
            assert len(first["rows"]) == PAGE and first["total"] in (n, None), (first["total"], len(first["rows"]))
            while first["total"] is None:  # the page went on without the first count: ask again until it is in
                await asyncio.sleep(0.05)
                first = (await _get(session, api))[1]
            assert first["total"] == n, first["total"]
            out["counts shown after (ms)"] = (time.perf_counter() - started) * 1000
            out["first page again (median)"] = await _median(session, api)
            out["next page"] = await _once(session, api + f"&offset={PAGE}")
            last = (n - 1) // PAGE * PAGE
            out["last page (offset)"] = await _once(session, api + f"&offset={last}")
            out["status=failed"] = await _once(session, api + "&status=failed")
            out["status=failed, next"] = await _once(session, api + f"&status=failed&offset={PAGE}")
            out["mode=val"] = await _once(session, api + "&mode=val")
            out["reward 0.2-0.3"] = await _once(session, api + "&min_reward=0.2&max_reward=0.3")
            out["sort=reward_desc"] = await _once(session, api + "&sort=reward_desc")
            out["sort=reward_desc, next"] = await _once(session, api + f"&sort=reward_desc&offset={PAGE}")
            out["search task-996"] = await _once(session, api + "&q=task-996")
    finally:
        await server.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--baseline-max", type=int, default=100_000, help="largest store the baseline reads")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results: dict[tuple[str, int], dict[str, float | None]] = {}
    pg = None
    if "postgresql" in backends:
        from tether.testing.pg_server import TempPostgres

        pg = TempPostgres().start()
    try:
        with tempfile.TemporaryDirectory(prefix="tether-bench-dashboard-") as tmp:
            for backend in backends:
                for n in sizes:
                    started = time.perf_counter()
                    if backend == "sqlite":
                        url = await fill_sqlite(Path(tmp) / f"store-{n}.db", n)
                    else:
                        assert pg is not None
                        url = await fill_postgres(pg.new_schema(), n)
                    print(f"{backend}: filled {n:,} rollouts in {time.perf_counter() - started:.1f} s", flush=True)
                    results[(backend, n)] = await measure(url, n, args.baseline_max)
                    if backend == "sqlite":
                        for suffix in ("", "-wal", "-shm"):
                            Path(tmp, f"store-{n}.db{suffix}").unlink(missing_ok=True)
    finally:
        if pg is not None:
            pg.cleanup()
    keys = list(next(iter(results.values())))
    columns = list(results)
    print(f"\nload average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
          f"{os.cpu_count()} CPUs; ms of one request over HTTP, the first of its page")  # fmt: skip
    print(f"{'request':28}" + "".join(f"{f'{b} {n:,}':>22}" for b, n in columns))
    for key in keys:
        row = f"{key:28}"
        for column in columns:
            value = results[column][key]
            row += f"{'-' if value is None else f'{value:.1f}':>22}"
        print(row)
    print("\nfirst page against the baseline (the old first page's read of the whole store), same run:")
    for backend, n in columns:
        base = results[(backend, n)]["baseline: list_rollouts()"]
        first = results[(backend, n)]["first page (cold)"]
        if base is not None and first is not None:
            print(f"  {backend:<11} {n:>11,} rollouts: {first:.1f} ms vs {base:.1f} ms: x{base / first:,.1f}")


if __name__ == "__main__":
    asyncio.run(main())
