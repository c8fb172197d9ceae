"""The proxy benchmark's measurement (for ``bench/proxy.py``): concurrent client rounds, direct and proxied
alternating, their percentiles, the added p50's interval from resampling bursts, and processes' CPU time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from typing import Any

import aiohttp
import orjson
from _proxy_servers import Delay, _body, _start_proxy


async def _round(
    session: aiohttp.ClientSession, urls: list[str], clients: int, calls: int, delay: Delay = (0.0, 0.0)
) -> list[list[float]]:
    """``clients`` concurrent clients (client k uses ``urls[k]``) making ``calls`` sequential calls each; the
    latencies by burst: the n-th list holds every client's n-th call (with a fixed answer time, one burst)."""
    payload = orjson.dumps(_body(delay))
    headers = {"Content-Type": "application/json"}
    bursts: list[list[float]] = [[] for _ in range(calls)]

    async def client(url: str) -> None:
        for n in range(calls):
            started = time.perf_counter()
            async with session.post(f"{url}/chat/completions", data=payload, headers=headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: {resp.status} {body[:200]!r}")
            bursts[n].append((time.perf_counter() - started) * 1000.0)

    await asyncio.gather(*(client(urls[k % len(urls)]) for k in range(clients)))
    return bursts


def _flat(bursts: list[list[float]]) -> list[float]:
    return [latency for burst in bursts for latency in burst]


def _added_p50_interval(
    direct: list[list[float]], proxied: list[list[float]], draws: int = 1000
) -> tuple[float, float]:
    """A 95% interval for the proxy's added p50, by resampling whole bursts (a burst's calls share its fate:
    counted one by one they would overstate how much a run of 120 bursts knows)."""
    draw = random.Random(0).choices
    added = sorted(
        _pct(_flat(draw(proxied, k=len(proxied))), 0.5) - _pct(_flat(draw(direct, k=len(direct))), 0.5)
        for _ in range(draws)
    )
    return added[int(0.025 * draws)], added[int(0.975 * draws) - 1]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: another proxy measured in the same rounds: its label, its URLs and its process id
Other = tuple[str, list[str], int]


#: (concurrent clients, fake LLM answer time in ms): instant, a fixed 50 ms (the 32 clients' calls stay in one
#: burst: all answered at once, all sent again at once), and 25-75 ms (a model whose answer time varies, as
#: real ones' do with the answer's length: the burst spreads out)
CASES: list[tuple[int, Delay]] = [(1, (0.0, 0.0)), (32, (0.0, 0.0)), (32, (50.0, 50.0)), (32, (25.0, 75.0))]


async def _measure(
    direct_url: str,
    proxy_urls: list[str] | None,
    pids: dict[str, int],
    calls: int,
    rounds: int,
    others: list[Other],
) -> list[dict[str, Any]]:
    """Alternate direct and proxied rounds. ``proxy_urls`` None: run the proxy here, in the clients' loop.
    ``others``: more proxies (Agent Lightning's, the floor), each in one more round of each turn. ``pids``:
    the ``proxy``, ``fake`` and ``clients`` processes, whose CPU time per call each row reports."""
    async with contextlib.AsyncExitStack() as stack:
        in_process = proxy_urls is None
        if proxy_urls is None:
            proxy_urls = await _start_proxy(direct_url, stack)
        rows = []
        connector = aiohttp.TCPConnector(limit=256, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector) as session:
            for clients, delay in CASES:
                per_round = max(1, calls // clients // rounds)  # slow answers too: see the docstring
                await _round(session, [direct_url], clients, 10, delay)  # warm up connections
                await _round(session, proxy_urls, clients, 10, delay)
                for other in others:
                    await _round(session, other[1], clients, 10, delay)
                direct: list[list[float]] = []  # by burst
                proxied: list[list[float]] = []
                other_latencies: list[list[float]] = [[] for _ in others]
                cpu = {"proxy": 0.0, "other": [0.0] * len(others)}
                # CPU of the clients and the fake LLM per call, on the direct and on tether's proxied path
                cost = {(who, path): 0.0 for who in ("clients", "fake") for path in ("direct", "proxied")}
                for _ in range(rounds):
                    before = {who: _cpu_s(pid) for who, pid in pids.items()}
                    direct += await _round(session, [direct_url], clients, per_round, delay)
                    middle = {who: _cpu_s(pid) for who, pid in pids.items()}
                    proxied += await _round(session, proxy_urls, clients, per_round, delay)
                    after = {who: _cpu_s(pid) for who, pid in pids.items()}
                    # in-process, the clients' own CPU is in both rounds: count only what the proxied round added
                    spent = after["proxy"] - middle["proxy"]
                    cpu["proxy"] += spent - ((middle["proxy"] - before["proxy"]) if in_process else 0.0)
                    for who in ("clients", "fake"):
                        cost[who, "direct"] += middle[who] - before[who]
                        cost[who, "proxied"] += after[who] - middle[who]
                    for k, (_, urls, pid) in enumerate(others):
                        start = _cpu_s(pid)
                        other_latencies[k] += _flat(await _round(session, urls, clients, per_round, delay))
                        cpu["other"][k] += _cpu_s(pid) - start
                row: dict[str, Any] = {"clients": clients, "delay": delay}
                row["direct"], row["proxied"] = _flat(direct), _flat(proxied)
                row["interval"] = _added_p50_interval(direct, proxied)
                row["cpu_ms"] = cpu["proxy"] * 1000.0 / len(row["proxied"])
                row["others"] = [
                    (latencies, spent * 1000.0 / max(1, len(latencies)))
                    for latencies, spent in zip(other_latencies, cpu["other"], strict=True)
                ]
                row["cost"] = {key: spent * 1000.0 / len(row["direct"]) for key, spent in cost.items()}
                rows.append(row)
    return rows
