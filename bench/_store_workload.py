"""The store benchmark's workloads (for ``bench/store.py``): LLM-sized spans, the timed calls of each backend
(enqueue, dequeue, add_span, get_spans, write+read, lifecycle) and their ``Result`` rows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from _previous_read import previous_reader

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
