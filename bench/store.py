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
runs against its in-memory store and the ratios are printed (``_AglStore`` below).
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
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _previous_read import previous_reader

from tether import open_store
from tether.store.base import Store
from tether.store.postgres import PostgresStore
from tether.store.sqlite import SqliteStore
from tether.types import AttemptStatus, RolloutSpec, Span, SpanKind

_WORDS = "the agent called a tool and then answered the question about the weather in paris with care".split()


def _text(n_chars: int, seed: int) -> str:
    words = [_WORDS[(seed + i * 7) % len(_WORDS)] for i in range(n_chars // 4)]
    return " ".join(words)[:n_chars]


def llm_attributes(i: int = 0) -> dict[str, Any]:
    """16 attributes like an LLM call's span: 512 prompt + 128 response token ids, ~1.8 KB of text."""
    return {
        "gen_ai.system": "tether",
        "gen_ai.request.model": "Qwen2.5-0.5B-Instruct",
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.max_tokens": 128,
        "request.messages": [
            {"role": "system", "content": _text(400, i)},
            {"role": "user", "content": _text(800, i + 1)},
        ],
        "response": {"role": "assistant", "content": _text(600, i + 2)},
        "prompt_token_ids": [(i * 31 + k * 17) % 151_000 for k in range(512)],
        "response_token_ids": [(i * 13 + k * 29) % 151_000 for k in range(128)],
        "finish_reason": "stop",
        "usage.prompt_tokens": 512,
        "usage.completion_tokens": 128,
        "usage.total_tokens": 640,
        "llm.request_id": f"req-{i}",
        "llm.latency_ms": 412.5,
        "proxy.route": "/r/ro/at/v1/chat/completions",
        "step": i,
    }


def llm_span(rollout_id: str, attempt_id: str, i: int) -> Span:
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        kind=SpanKind.LLM,
        name="chat.completions",
        agent_name="solver",
        attributes=llm_attributes(i),
    )


@dataclass
class Result:
    backend: str
    workload: str
    ops: int
    seconds: float
    latencies: list[float]
    unit: str = "ops"
    per_op: int = 1  # items (spans) per timed call
    cpu_seconds: float | None = None  # this process's CPU time over the calls (in-process backends)

    @property
    def rate(self) -> float:
        return self.ops * self.per_op / self.seconds

    @property
    def cpu_rate(self) -> float | None:
        """The rate by CPU time: what a core of its own would do (the machine may be shared)."""
        return None if not self.cpu_seconds else self.ops * self.per_op / self.cpu_seconds

    def pct(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000


async def _timed(n: int, call: Callable[[int], Awaitable[Any]]) -> tuple[float, list[float]]:
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        latencies.append(time.perf_counter() - t0)
    return time.perf_counter() - start, latencies


async def _running_attempts(store: Store, n: int) -> list[tuple[str, str]]:
    await store.enqueue([RolloutSpec(input={"i": i}) for i in range(n)])
    claimed = await store.dequeue("bench", limit=n)
    return [(r.rollout_id, a.attempt_id) for r, a in claimed]


async def bench_backend(
    name: str, fresh: Callable[[], AbstractAsyncContextManager[Any]], sizes: dict[str, int]
) -> list[Result]:
    """Every workload on ``name``; ``fresh()`` opens a new empty store (anything with the Store methods)."""
    results = []
    n = sizes["calls"]
    async with fresh() as store:
        secs, lat = await _timed(n, lambda i: store.enqueue([RolloutSpec(input={"i": i})]))
        results.append(Result(name, "enqueue", n, secs, lat, "rollouts"))
        secs, lat = await _timed(n, lambda i: store.dequeue("w"))
        results.append(Result(name, "dequeue", n, secs, lat, "rollouts"))

    async with fresh() as store:
        attempts = await _running_attempts(store, 50)
        nb = sizes["batches"]
        spans = [llm_span(*attempts[i % 50], i) for i in range(n + nb * 100)]
        secs, lat = await _timed(n, lambda i: store.add_spans([spans[i]]))
        results.append(Result(name, "add_span x1", n, secs, lat, "spans"))
        secs, lat = await _timed(nb, lambda i: store.add_spans(spans[n + i * 100 : n + (i + 1) * 100]))
        results.append(Result(name, "add_span x100", nb, secs, lat, "spans", per_op=100))

    async with fresh() as store:
        attempts = await _running_attempts(store, 20)
        for k, (rid, aid) in enumerate(attempts):
            await store.add_spans([llm_span(rid, aid, k * 20 + j) for j in range(20)])
        nq = sizes["queries"]
        secs, lat = await _timed(nq, lambda i: store.get_spans(attempts[i % 20][1]))
        results.append(Result(name, "get_spans (20)", nq, secs, lat, "queries"))

    results += await read_rollouts(name, fresh, sizes)

    for workers in (1, 16):
        async with fresh() as store:
            total = sizes["rollouts"] * (4 if workers > 1 else 1)
            secs, lat = await lifecycle(store, workers, total)
            results.append(Result(name, f"lifecycle x{workers}", total, secs, lat, "rollouts"))
    return results


READ_SPANS = 16  # spans of each rollout the read workload writes and reads back


async def read_rollouts(
    name: str, fresh: Callable[[], AbstractAsyncContextManager[Any]], sizes: dict[str, int]
) -> list[Result]:
    """Write ``read_rollouts`` rollouts of 16 LLM spans, one batch each, then read every one back with
    ``get_spans``, ``read_passes`` times; the same reads through the previous path, and from a fresh store."""
    n, passes = sizes["read_rollouts"], sizes["read_passes"]
    results = []
    in_process = "http" not in name  # (over HTTP this process's CPU time leaves the server's out)

    def cpu_since(start: float) -> float | None:
        return time.process_time() - start if in_process else None

    async with fresh() as store:
        attempts = await _running_attempts(store, n)
        batches = [
            [llm_span(rid, aid, k * READ_SPANS + j) for j in range(READ_SPANS)]
            for k, (rid, aid) in enumerate(attempts)
        ]
        cpu = time.process_time()
        secs, lat = await _timed(n, lambda i: store.add_spans(batches[i]))
        results.append(Result(name, "write 16-span", n, secs, lat, "rollouts", cpu_seconds=cpu_since(cpu)))
        ids = [aid for _, aid in attempts] * passes
        cpu = time.process_time()
        secs, lat = await _timed(len(ids), lambda i: store.get_spans(ids[i]))
        results.append(Result(name, "read 16-span", len(ids), secs, lat, "rollouts", cpu_seconds=cpu_since(cpu)))
        previous = previous_reader(store)
        if previous is not None:
            old, new = await previous(ids[0]), await store.get_spans(ids[0])
            assert [s.to_dict() for s in old] == [s.to_dict() for s in new], "the two paths read different spans"
            cpu = time.process_time()
            secs, lat = await _timed(len(ids), lambda i: previous(ids[i]))
            results.append(
                Result(name, "read (previous)", len(ids), secs, lat, "rollouts", cpu_seconds=cpu_since(cpu))
            )
        cold: Store | None = None  # another process's view: nothing in its cache, every span decoded
        if isinstance(store, SqliteStore) and store.path != ":memory:":
            cold, label = SqliteStore(store.path), "read (from file)"
        elif isinstance(store, PostgresStore):
            cold, label = PostgresStore(store.url), "read (other store)"
        if cold is not None:
            try:
                cpu = time.process_time()
                secs, lat = await _timed(len(ids), lambda i: cold.get_spans(ids[i]))
                secs_cpu = cpu_since(cpu)
                results.append(Result(name, label, len(ids), secs, lat, "rollouts", cpu_seconds=secs_cpu))
            finally:
                await cold.close()
    return results


async def round_trip_floor(url: str, n: int) -> Result:
    """asyncpg's simplest query (``SELECT 1``) on a connection of its own: the least any PostgreSQL store call
    costs, and so the floor of a read the span cache serves (one round trip plus the copy SQLite also makes)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.fetchval("SELECT 1")
        secs, lat = await _timed(n, lambda i: conn.fetchval("SELECT 1"))
    finally:
        await conn.close()
    return Result("postgresql", "SELECT 1 (floor)", n, secs, lat, "queries")


async def lifecycle(store: Store, workers: int, total: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    per_worker = total // workers
    # the spans' content is built once: a runner gets its spans ready-made, building them is not the store's cost
    attributes = [llm_attributes(k) for k in range(3)]

    async def worker(w: int) -> None:
        for i in range(per_worker):
            t0 = time.perf_counter()
            await store.enqueue([RolloutSpec(input={"w": w, "i": i})])
            claimed: list[Any] = []
            while not claimed:
                claimed = await store.dequeue(f"w{w}")
            rollout, attempt = claimed[0]
            await store.add_spans(
                [
                    Span(
                        rollout_id=rollout.rollout_id, attempt_id=attempt.attempt_id, kind=SpanKind.LLM,
                        name="chat.completions", agent_name="solver", attributes=attributes[k],
                    )
                    for k in range(3)
                ]
            )  # fmt: skip
            await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    return time.perf_counter() - start, latencies


# -- backends -------------------------------------------------------------------------------------------

_SERVER = """
import asyncio, sys
from tether import open_store
from tether.server import start_server

from tether.store.sqlite import SqliteStore

async def main():
    url = sys.argv[1]
    if len(sys.argv) > 2:  # a span cache bound for the SQLite store
        store = SqliteStore(url[len("sqlite:///"):], span_cache_bytes=int(sys.argv[2]))
    else:
        store = open_store(url)
    server = await start_server(store, host="127.0.0.1", port=0, token=None)
    print(server.url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop()

asyncio.run(main())
"""


# Each fresh store makes one call before its workload is timed, as a runner opens its store once and then
# makes its calls: a fresh PostgreSQL database creates its schema on its first call (20-50 ms on the
# development machine), which, timed, was the whole p99 of the 16-worker lifecycle (its first 16 rollouts
# waited for it: 4% of 400). The connections the pool opens later are in the timings.


def _factory(backend: str, tmp: Path, pg: Any = None) -> Callable[[], AbstractAsyncContextManager[Store]]:
    counter = iter(range(1_000_000))

    def url_for(kind: str) -> str:
        if kind == "postgresql":
            return str(pg.new_schema())
        return "memory:" if kind == "memory" else f"sqlite:///{tmp}/bench-{next(counter)}.db"

    @asynccontextmanager
    async def local() -> AsyncIterator[Store]:
        store = open_store(url_for(backend))
        try:
            await store.count_rollouts()  # opened before the clock starts (see above _factory)
            yield store
        finally:
            await store.close()

    @asynccontextmanager
    async def http() -> AsyncIterator[Store]:
        kind, _, variant = backend.removeprefix("http+").partition("-")
        extra = ["0"] if variant == "nocache" else []  # the SQLite store without its span cache
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, url_for(kind), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip()
        if not url:
            proc.kill()
            raise RuntimeError("the store server did not start")
        store = open_store(url)
        try:
            await store.count_rollouts()  # opened before the clock starts (see above _factory)
            yield store
        finally:
            await store.close()
            SERVER_RSS_MB.setdefault(backend, []).append(_peak_rss_mb(proc.pid))
            proc.stdin.close()
            proc.wait(timeout=30)

    return http if backend.startswith("http+") else local


#: the store server's peak RSS (MB) in each fresh store of a ``http+`` backend, in bench_backend's order
SERVER_RSS_MB: dict[str, list[float]] = {}
_FRESH_STORES = ["enqueue", "add_span", "get_spans", "write+read", "lifecycle x1", "lifecycle x16"]


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MB; Linux only (0 elsewhere)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)


def print_server_memory() -> None:
    """The store server's peak RSS per fresh store; against the SQLite server without its span cache."""
    if not SERVER_RSS_MB:
        return
    base = SERVER_RSS_MB.get("http+sqlite-nocache")
    print("\nstore server peak RSS, MB (a fresh server per workload group):")
    print(f"  {'backend':<20} " + " ".join(f"{label:>13}" for label in _FRESH_STORES))
    for backend, peaks in SERVER_RSS_MB.items():
        cells = []
        for k, peak in enumerate(peaks):
            ratio = (
                f" x{peak / base[k]:.2f}"
                if base and k < len(base) and base[k] and backend != "http+sqlite-nocache"
                else ""
            )
            cells.append(f"{peak:.0f}{ratio}".rjust(13))
        print(f"  {backend:<20} " + " ".join(cells))
    if base:
        print("  (xN: against http+sqlite-nocache, the same server with the SQLite span cache off)")


def _http_available() -> str | None:
    try:
        from tether.server import start_server  # noqa: F401
    except ImportError as exc:
        return f"HTTP backends skipped: tether.store.http.server is not available ({exc})"
    return None


# -- Agent Lightning 0.3 (optional comparison) ----------------------------------------------------------


class _Ref:
    def __init__(self, rollout_id: str, attempt_id: str = "") -> None:
        self.rollout_id, self.attempt_id = rollout_id, attempt_id


class _AglStore:
    """The bench's calls mapped onto an agentlightning LightningStore (its public API, 0.3.0)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.rollout_of: dict[str, str] = {}

    async def enqueue(self, specs: list[RolloutSpec]) -> list[_Ref]:
        return [_Ref((await self.store.enqueue_rollout(input=s.input, mode="train")).rollout_id) for s in specs]

    async def dequeue(self, worker_id: str, limit: int = 1) -> list[tuple[_Ref, _Ref]]:
        claimed = await self.store.dequeue_many_rollouts(limit=limit, worker_id=worker_id)
        out = []
        for ar in claimed:
            self.rollout_of[ar.attempt.attempt_id] = ar.rollout_id
            out.append((_Ref(ar.rollout_id), _Ref(ar.rollout_id, ar.attempt.attempt_id)))
        return out

    async def add_spans(self, spans: list[Span]) -> None:
        from agentlightning.types import OtelResource, TraceStatus
        from agentlightning.types import Span as AglSpan

        seqs = await self.store.get_many_span_sequence_ids([(s.rollout_id, s.attempt_id) for s in spans])
        converted = [
            AglSpan(
                rollout_id=s.rollout_id, attempt_id=s.attempt_id, sequence_id=seq, trace_id=s.rollout_id,
                span_id=s.span_id, parent_id=None, name=s.name, status=TraceStatus(status_code="OK"),
                attributes={k: v if isinstance(v, str | int | float | list) and not (
                    isinstance(v, list) and v and isinstance(v[0], dict)) else orjson_str(v)
                    for k, v in s.attributes.items()},
                events=[], links=[], start_time=s.start_time, end_time=s.end_time, context=None, parent=None,
                resource=OtelResource(attributes={}, schema_url=""),
            )
            for s, seq in zip(spans, seqs, strict=True)
        ]  # fmt: skip
        if len(converted) == 1:
            await self.store.add_span(converted[0])
        else:
            await self.store.add_many_spans(converted)

    async def get_spans(self, attempt_id: str) -> Any:
        return await self.store.query_spans(self.rollout_of[attempt_id], attempt_id)

    async def finish_attempt(self, attempt_id: str, status: AttemptStatus, reward: float | None = None) -> None:
        await self.store.update_attempt(self.rollout_of[attempt_id], attempt_id, status=status.value)


def orjson_str(value: Any) -> str:
    from tether import _json

    return _json.dumps(value).decode()


def _agl_factory(mode: str) -> Callable[[], AbstractAsyncContextManager[Any]]:
    @asynccontextmanager
    async def fresh() -> AsyncIterator[Any]:
        from agentlightning.store.memory import InMemoryLightningStore

        store = InMemoryLightningStore()
        if mode == "memory":
            yield _AglStore(store)
            return
        import socket

        from agentlightning.store.client_server import LightningStoreClient, LightningStoreServer

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = LightningStoreServer(store, host="127.0.0.1", port=port, launch_mode="thread")
        await server.start()
        client = LightningStoreClient(server.endpoint)
        try:
            yield _AglStore(client)
        finally:
            await client.close()
            await server.stop()

    return fresh


# -- report ---------------------------------------------------------------------------------------------


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
