"""The stores the store benchmark runs against (for ``bench/store.py``): a fresh store per workload for each
backend (local, or an HTTP store server in its own process, whose peak RSS is recorded), and Agent Lightning's
store behind the same calls (an optional comparison)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from tether import open_store
from tether.store.base import Store
from tether.types import AttemptStatus, RolloutSpec, Span

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
