"""Proxy overhead: per-call latency calling the fake LLM directly vs through the proxy (RemoteBackend → FakeLLM).

    .venv/bin/python bench/proxy.py [--quick] [--calls N] [--floor] [--in-process] [--uvloop] [--agl-python PATH]

The fake LLM and the proxy (with a memory store, spans recorded as in a rollout) each run in their own
process; the clients run here on one event loop with one aiohttp session. ``--in-process`` runs the proxy
in the clients' event loop instead, as the trainer runs it next to its agents. Direct and
proxied rounds alternate so that machine noise hits both alike. Prints p50/p99 per call for 1 and 32
concurrent clients and the overhead the proxy adds, and the proxy process's CPU time per call.

``--agl-python PATH`` (a Python with ``agentlightning`` installed; never a tether dependency) also runs Agent
Lightning's own LLM proxy (its LiteLLM-based ``LLMProxy``, ``bench/_agl_proxy.py``) in front of the same fake
LLM, in the same alternating rounds with the same clients, and prints its added latency and the ratio
AGL/tether. Both proxies record token ids (tether's backend asks for ``return_token_ids``, as AGL's does).

``--floor`` also runs a byte-forwarding ``asyncio.Protocol`` proxy (``bench/_floor_proxy.py``: no JSON, no
record, the same upstream client) in the same rounds: what any Python proxy adds on this machine. Each row also
prints the CPU per call of the bench's own clients and fake LLM on the direct and the proxied path, so that the
proxy's share of the machine is seen next to theirs.

With a backend that answers instantly, 32 clients in a closed loop saturate the machine (2 shared cores
here): latency is then queueing behind the proxy's CPU cost per call, not a fixed per-call overhead. The
50 ms row gives the fake LLM a fixed answer time (a fast real model): the 32 calls stay in lockstep, answered
together and sent again together, so the proxy serves each burst one call at a time. The last row draws each
answer time from 25-75 ms (real models' times vary with the answer's length): the bursts spread out. Each
row gets the same number of calls (4,000: 120 bursts of 32 per path at 32 clients), and its added p50 comes with
a 95% interval from resampling whole bursts; with a quarter of the calls on the model rows, as before, their p50
moved by +-1 ms from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import random
import re
import statistics
import subprocess
import threading
import time
from typing import Any

import aiohttp
import orjson

ROLLOUTS = 32
#: the fake LLM's answer time in ms, drawn uniformly from (low, high) per call
Delay = tuple[float, float]
QUESTION = "What is the capital of France? Reply with one word."
#: the fake LLM's answer time travels in the message (every proxy forwards messages as they are; AGL's drops
#: ``metadata`` and ``user``)
_DELAY = re.compile(r"\[bench_delay_ms=([0-9.]+)(?:-([0-9.]+))?\]")


def _body(delay: Delay) -> dict[str, Any]:
    low, high = delay
    question = f"{QUESTION} [bench_delay_ms={low:g}-{high:g}]"
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": question},
        ],
        "temperature": 0.7,
        "max_tokens": 32,
    }


def _serve_fake(queue: Any) -> None:
    from tether.testing.fake_llm import FakeLLM, text

    draw = random.Random(0).uniform

    def answer(request: dict[str, Any]) -> Any:
        found = _DELAY.search(str(request["messages"][-1].get("content")))
        delay_ms = float(found.group(1)) if found else 0.0
        if found and found.group(2):  # an answer time drawn uniformly from a range (a jittered model)
            delay_ms = draw(delay_ms, float(found.group(2)))
        return text("Paris is the capital of France.", delay_s=delay_ms / 1000.0)

    async def main() -> None:
        llm = FakeLLM(handler=answer)
        await llm.start()
        queue.put(llm.base_url)
        await asyncio.Event().wait()

    asyncio.run(main())


async def _start_proxy(fake_url: str, stack: contextlib.AsyncExitStack) -> list[str]:
    """A proxy on a memory store with ``ROLLOUTS`` open attempts (closed with ``stack``), and their URLs."""
    from tether.capture import span_batcher
    from tether.models.remote import RemoteBackend
    from tether.proxy import ProxyServer
    from tether.store.memory import MemoryStore
    from tether.types import RolloutSpec

    store = MemoryStore()
    await store.enqueue([RolloutSpec(input=i) for i in range(ROLLOUTS)])
    claimed = await store.dequeue("bench", limit=ROLLOUTS)
    # as the trainer's session makes it (a commit before ``quiet_s`` existed: its default batcher)
    quiet = getattr(span_batcher, "PROXY_QUIET_S", None)
    batcher = span_batcher.SpanBatcher(store, **({"quiet_s": quiet} if quiet else {}))
    await stack.enter_async_context(batcher)
    backend = RemoteBackend(fake_url, model="m", return_token_ids=True)
    proxy = await stack.enter_async_context(ProxyServer(backend, batcher=batcher, close_backend=True))
    return [await stack.enter_async_context(proxy.attempt(r.rollout_id, a.attempt_id)) for r, a in claimed]


def _serve_proxy(fake_url: str, queue: Any, uvloop: bool = False) -> None:
    if uvloop:  # the proxy process on uvloop's event loop (libuv) instead of asyncio's
        import uvloop as _uvloop

        _uvloop.install()

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            queue.put(await _start_proxy(fake_url, stack))
            await asyncio.Event().wait()

    asyncio.run(main())


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


#: (concurrent clients, fake LLM answer time in ms): instant, a fixed 50 ms (the 32 clients' calls stay in one
#: burst: all answered at once, all sent again at once), and 25-75 ms (a model whose answer time varies, as
#: real ones' do with the answer's length: the burst spreads out)
CASES: list[tuple[int, Delay]] = [(1, (0.0, 0.0)), (32, (0.0, 0.0)), (32, (50.0, 50.0)), (32, (25.0, 75.0))]


def _start_agl(python: str, fake_url: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Agent Lightning's LLMProxy in front of ``fake_url``, run by ``python``; the process and its URLs."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_agl_proxy.py")
    process = subprocess.Popen(
        [python, script, fake_url, str(ROLLOUTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("AGL_URLS "):
            # drain what LiteLLM prints from now on, so that a full pipe never stalls its proxy
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, orjson.loads(line.split(" ", 1)[1])
    raise RuntimeError(
        f"Agent Lightning's LLMProxy did not start (exit status {process.wait()}): run "
        f"`{python} {script} {fake_url} 1` to see why"
    )


def _serve_floor(fake_url: str, queue: Any) -> None:
    from _floor_proxy import serve  # bench/ is this script's directory: on the spawned process's path too

    serve(fake_url, queue, ROLLOUTS)


#: another proxy measured in the same rounds: its label, its URLs and its process id
Other = tuple[str, list[str], int]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    parser.add_argument("--calls", type=int, default=None, help="calls per concurrency level and path")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the proxy in the clients' process and event loop (as the trainer runs it next to its agents)",
    )
    parser.add_argument(
        "--agl-python",
        default=os.environ.get("TETHER_BENCH_AGL_PYTHON"),
        help="a Python with agentlightning installed: also measure its LLMProxy (env TETHER_BENCH_AGL_PYTHON)",
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="run the proxy process on uvloop (pip install uvloop; not a dependency)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure a byte-forwarding asyncio proxy (bench/_floor_proxy.py): the floor of any Python proxy",
    )
    args = parser.parse_args()
    calls = args.calls or (400 if args.quick else 4000)
    rounds = 4 if args.quick else 10

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fake = ctx.Process(target=_serve_fake, args=(queue,), daemon=True)
    fake.start()
    fake_url = queue.get(timeout=60)
    processes = [fake]
    proxy_urls = None
    assert fake.pid is not None
    pids = {"proxy": os.getpid(), "fake": fake.pid, "clients": os.getpid()}
    agl_process: subprocess.Popen[str] | None = None
    others: list[Other] = []
    if not args.in_process:
        proxy = ctx.Process(target=_serve_proxy, args=(fake_url, queue, args.uvloop), daemon=True)
        proxy.start()
        processes.insert(0, proxy)
        proxy_urls = queue.get(timeout=60)
        assert proxy.pid is not None
        pids["proxy"] = proxy.pid
    try:
        if args.agl_python:
            agl_process, agl_urls = _start_agl(args.agl_python, fake_url)
            others.append(("Agent Lightning's LLMProxy (LiteLLM)", agl_urls, agl_process.pid))
        if args.floor:
            floor = ctx.Process(target=_serve_floor, args=(fake_url, queue), daemon=True)
            floor.start()
            processes.append(floor)
            assert floor.pid is not None
            others.append(("floor: a byte-forwarding asyncio proxy", queue.get(timeout=60), floor.pid))
        rows = asyncio.run(_measure(fake_url, proxy_urls, pids, calls, rounds, others))
    finally:
        for process in processes:
            process.terminate()
            process.join(10)
        if agl_process is not None:
            agl_process.kill()
            agl_process.wait(10)
    _report(rows, args, calls, rounds, [label for label, _, _ in others])


def _model(delay: Delay) -> str:
    return f"{delay[0]:.0f}ms" if delay[0] == delay[1] else f"{delay[0]:.0f}-{delay[1]:.0f}ms"


def _report(
    rows: list[dict[str, Any]], args: argparse.Namespace, calls: int, rounds: int, others: list[str]
) -> None:
    load = os.getloadavg()
    layout = "proxy in the clients' process" if args.in_process else "proxy in its own process"
    layout += " on uvloop" if args.uvloop and not args.in_process else ""
    print(f"proxy overhead, {layout} ({calls} calls per row at most, {rounds} alternating rounds)")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    header = f"{'clients':>7} {'model':>8} | {'direct p50':>10} {'direct p99':>10} | {'proxy p50':>10}"
    header += (
        f" {'proxy p99':>10} | {'added p50':>10} {'(95% interval)':>18} {'added p99':>10} | {'proxy CPU/call':>14}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        d50, d99 = _pct(row["direct"], 0.5), _pct(row["direct"], 0.99)
        p50, p99 = _pct(row["proxied"], 0.5), _pct(row["proxied"], 0.99)
        low, high = row["interval"]
        print(
            f"{row['clients']:>7} {_model(row['delay']):>8} | {d50:>8.3f}ms {d99:>8.3f}ms | {p50:>8.3f}ms"
            f" {p99:>8.3f}ms | {p50 - d50:>8.3f}ms {f'({low:.2f}, {high:.2f})':>18} {p99 - d99:>8.3f}ms |"
            f" {row['cpu_ms']:>12.3f}ms"
        )
    mean_direct = statistics.fmean(rows[0]["direct"])
    print(f"(1 client: mean direct {mean_direct:.3f} ms; targets: added p50 < 1 ms, added p99 < 5 ms)")
    print(
        "(95% interval of the added p50, resampling whole bursts: a target is met in this run when all of it is"
        " below)"
    )
    if not args.in_process:
        print("\nCPU per call of the bench's own clients and fake LLM, direct -> proxied (the proxy's is above)")
        for row in rows:
            cost = row["cost"]
            print(
                f"{row['clients']:>7} {_model(row['delay']):>8} | clients {cost['clients', 'direct']:.3f} -> "
                f"{cost['clients', 'proxied']:.3f} ms | fake LLM {cost['fake', 'direct']:.3f} -> "
                f"{cost['fake', 'proxied']:.3f} ms"
            )
    for k, label in enumerate(others):
        print(f"\n{label}, same rounds; ratio: its / tether's (> 1: tether faster)")
        header = f"{'clients':>7} {'model':>8} | {'its p50':>10} {'its p99':>10} |"
        header += f" {'added p50':>10} {'added p99':>10}"
        header += f" | {'its CPU/call':>12} | {'added p50 ratio':>15} {'CPU ratio':>9}"
        print(header)
        print("-" * len(header))
        for row in rows:
            latencies, cpu_ms = row["others"][k]
            d50, d99 = _pct(row["direct"], 0.5), _pct(row["direct"], 0.99)
            a50, a99 = _pct(latencies, 0.5), _pct(latencies, 0.99)
            added = _pct(row["proxied"], 0.5) - d50
            ratio = (a50 - d50) / added if added > 0 else float("inf")
            cpu_ratio = cpu_ms / row["cpu_ms"] if row["cpu_ms"] else float("inf")
            print(
                f"{row['clients']:>7} {_model(row['delay']):>8} | {a50:>8.3f}ms {a99:>8.3f}ms |"
                f" {a50 - d50:>8.3f}ms {a99 - d99:>8.3f}ms | {cpu_ms:>10.3f}ms |"
                f" {ratio:>14.1f}x {cpu_ratio:>8.1f}x"
            )


if __name__ == "__main__":
    main()
