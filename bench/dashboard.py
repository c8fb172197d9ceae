"""The dashboard's rollout pages on small and large SQLite stores: how long one page takes over HTTP.

For each store size: the first page (cold: the dashboard reads every rollout once to build its index), then
pages served from the index (next pages, a far page, a status filter, a search), and a page while the store is
being written to (the cheap poll). Prints milliseconds and the ratio to the smallest store.

    .venv/bin/python bench/dashboard.py                 # 1,000 and 100,000 rollouts (about a minute to fill)
    .venv/bin/python bench/dashboard.py --sizes 1000,10000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from tether.dashboard.server import start_dashboard
from tether.dashboard.sources import Sources
from tether.store import open_store
from tether.types import AttemptStatus, Mode, RolloutSpec


async def fill(url: str, n: int) -> None:
    store = open_store(url)
    rng = random.Random(0)
    try:
        for start in range(0, n, 5000):
            count = min(5000, n - start)
            await store.enqueue(
                [RolloutSpec(input={"n": start + i}, task_id=f"task-{(start + i) % 997}", mode=Mode.TRAIN)
                 for i in range(count)]
            )  # fmt: skip
            claimed = await store.dequeue("bench", limit=count)

            async def finish(attempt_id: str) -> None:
                ok = rng.random() < 0.85
                await store.finish_attempt(
                    attempt_id,
                    AttemptStatus.SUCCEEDED if ok else AttemptStatus.FAILED,
                    reward=rng.random() if ok else None,
                    error=None if ok else "boom",
                )

            await asyncio.gather(*(finish(a.attempt_id) for _, a in claimed))
    finally:
        await store.close()


async def timed(session: aiohttp.ClientSession, url: str, repeat: int = 1) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        async with session.get(url) as response:
            body = await response.read()
            assert response.status == 200, body[:300]
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(url: str, n: int) -> dict[str, float]:
    server = await start_dashboard(Sources(url, None))
    source = url.replace("/", "%2F").replace(":", "%3A")
    api = f"{server.url}api/rollouts?source={source}&limit=50"
    out: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession() as session:
            out["first page (cold)"] = await timed(session, api)
            out["next page"] = await timed(session, api + "&offset=50", 5)
            out["a middle page"] = await timed(session, api + f"&offset={(n // 2 // 50) * 50}", 5)
            out["status=failed"] = await timed(session, api + "&status=failed&offset=50", 5)
            out["search by id"] = await timed(session, api + "&q=ro-00", 5)
            writer = open_store(url)
            try:
                await writer.enqueue([RolloutSpec(input={"late": True}, mode=Mode.TRAIN)])
                await asyncio.sleep(1.1)  # past the poll interval: the next page polls
                out["page after a write (poll)"] = await timed(session, api)
            finally:
                await writer.close()
    finally:
        await server.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            url = f"sqlite:///{Path(tmp) / f'store-{n}.db'}"
            started = time.perf_counter()
            await fill(url, n)
            print(f"filled {n:,} rollouts in {time.perf_counter() - started:.1f} s", flush=True)
            results[n] = await measure(url, n)
    base = results[sizes[0]]
    names = list(base)
    header = f"{'request (median ms)':28}" + "".join(f"{f'{n:,} rollouts':>20}" for n in sizes)
    print("\n" + header)
    for i, name in enumerate(names):
        row = f"{name:28}"
        for n in sizes:
            value = list(results[n].values())[i]
            ratio = value / list(base.values())[i]
            row += f"{value:>12.1f} ({ratio:>4.1f}x)" if n != sizes[0] else f"{value:>20.1f}"
        print(row)


if __name__ == "__main__":
    asyncio.run(main())
