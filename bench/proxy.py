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
import multiprocessing as mp
import os
import statistics
import subprocess
import time
from typing import Any

from _proxy_measure import Other, _measure, _pct
from _proxy_servers import Delay, _serve_fake, _serve_floor, _serve_proxy, _start_agl


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
