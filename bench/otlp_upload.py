"""A large OTLP/JSON upload to the store server's ``POST /v1/traces`` while a client polls ``/v1/health``:
how long the upload takes, and the slowest health answer during it (issue 26 item 8).

    python bench/otlp_upload.py [--spans 100000] [--traces 1000] [--store sqlite|memory]

Prints the body size, the upload's time, the health polls answered during it and their slowest and median
latency, and the server process's peak RSS. Everything on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tether.server import start_server
from tether.store import open_store


def _body(n_spans: int, n_traces: int) -> bytes:
    spans: list[dict[str, Any]] = []
    per = max(n_spans // n_traces, 1)
    for t in range(n_traces):
        trace = f"{t:032x}"
        for i in range(per):
            spans.append(
                {
                    "traceId": trace,
                    "spanId": f"{i + 1:016x}",
                    "parentSpanId": "" if i == 0 else f"{1:016x}",
                    "name": "chat m",
                    "startTimeUnixNano": str(1_700_000_000_000_000_000 + i),
                    "endTimeUnixNano": str(1_700_000_000_000_000_000 + i + 1000),
                    "attributes": [
                        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                        *[
                            {
                                "key": "gen_ai.input.messages",
                                "value": {
                                    "stringValue": json.dumps(
                                        [{"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}]
                                    )
                                },
                            }
                        ][: 1 if i == 0 else 0],
                    ],
                }
            )
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, separators=(",", ":")).encode()


async def _main(args: argparse.Namespace) -> None:
    body = _body(args.spans, args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store("memory:" if args.store == "memory" else f"sqlite:///{Path(tmp) / 't.db'}")
        async with await start_server(store) as server, aiohttp.ClientSession() as http:
            done = asyncio.Event()
            latencies: list[float] = []
            answered: list[float] = []  # when each health answer came: the longest gap is the longest stall

            async def poll() -> None:
                while not done.is_set():
                    start = time.perf_counter()
                    async with http.get(server.url + "/v1/health") as r:
                        await r.read()
                    latencies.append(time.perf_counter() - start)
                    answered.append(time.perf_counter())
                    await asyncio.sleep(0.01)

            poller = asyncio.ensure_future(poll())
            await asyncio.sleep(0.1)
            latencies.clear()
            start = time.perf_counter()
            answered[:] = [start]
            headers = {"Content-Type": "application/json"}
            async with http.post(server.url + "/v1/traces", data=body, headers=headers) as r:
                status = r.status
                await r.read()
            took = time.perf_counter() - start
            answered.append(time.perf_counter())
            done.set()
            await poller
            rollouts = len(await store.list_rollouts())
        await store.close()
    gap = max(b - a for a, b in itertools.pairwise(answered))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"body {len(body) / 1e6:.1f} MB, {args.spans} spans in {args.traces} traces, store {args.store}")
    print(f"upload: HTTP {status} in {took:.2f} s, {rollouts} rollouts")
    print(
        f"health during it: {len(latencies)} answers, slowest {max(latencies) * 1000:.0f} ms, "
        f"median {statistics.median(latencies) * 1000:.1f} ms, longest gap between answers {gap * 1000:.0f} ms"
    )
    print(f"peak RSS (client and server, one process): {peak:.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    asyncio.run(_main(parser.parse_args()))
