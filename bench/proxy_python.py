"""The proxy's own Python per call, without sockets: what ``bench/proxy.py`` cannot resolve on a shared machine.

    .venv/bin/python bench/proxy_python.py [--bursts N]

Bursts of 32 requests (the bench's chat body, as aiohttp sends it) are fed straight to the proxy's HTTP
server (``_Connection.data_received`` on an in-memory transport) and answered by its real ``RemoteBackend``,
whose upstream pool is swapped for one that answers the fake LLM's recorded bytes after one loop turn. So
everything a proxied call runs in Python is timed (parse, validate, the upstream payload, the time limit, the
answer's parse and re-encoding, the write, the span handed to the batcher) and nothing of the kernel's. The
span itself is built and stored when the batcher writes (between bursts, as behind a real proxy): timed apart.

The same bursts go through ``bench/_floor_proxy.py`` (the byte forwarder ``bench/proxy.py --floor`` runs),
swapped alike: its Python per call is the floor. Prints microseconds per call, medians over the bursts, and
the ratio tether/floor. On 2 cores shared by agents, proxy and model, what the proxy adds to a burst of 32 is
mostly its CPU per call times the burst: every microsecond here is ~16 µs on the median call of a burst.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _floor_proxy
from _proxy_servers import _body

CLIENTS = 32
#: what the bench's fake LLM answers (``text("Paris is the capital of France.")`` with token ids): 177 prompt
#: and 31 answer token ids, as ``RemoteBackend(return_token_ids=True)`` gets them
_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-fake-1",
        "object": "chat.completion",
        "created": 1795673940,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Paris is the capital of France."},
                "finish_reason": "stop",
                "logprobs": None,
                "token_ids": list(b"Paris is the capital of France."),
            }
        ],
        "usage": {"prompt_tokens": 177, "completion_tokens": 31, "total_tokens": 208},
        "prompt_token_ids": list(range(40, 217)),
    }
)


class _Transport(asyncio.Transport):
    """An in-memory TCP transport: counts what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name == "sockname" else default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Upstream:
    """In place of ``tether._http11.Http11Pool``: answers the recorded bytes after one turn of the loop."""

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        await asyncio.sleep(0)
        return 200, _ANSWER

    def close(self) -> None:
        pass


def _requests(paths: list[str]) -> list[bytes]:
    body = orjson.dumps(_body((50.0, 50.0)))
    head = (
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
        "User-Agent: Python/3.11 aiohttp/3.13\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n"
    )
    return [head.format(path, len(body)).encode() + body for path in paths]


async def _bursts(protocols: list[Any], requests: list[bytes], writes: list[_Transport], bursts: int,
                  between: Any) -> list[float]:  # fmt: skip
    """Microseconds per call of each burst: from feeding 32 requests to the 32 answers written."""
    per_call = []
    for _ in range(bursts):
        expected = sum(t.writes for t in writes) + len(requests)
        started = time.perf_counter()
        for protocol, request in zip(protocols, requests, strict=True):
            protocol.data_received(request)
        while sum(t.writes for t in writes) < expected:
            await asyncio.sleep(0)
        per_call.append((time.perf_counter() - started) / len(requests) * 1e6)
        await between()
    return per_call


async def _tether(bursts: int) -> tuple[list[float], list[float]]:
    from tether.capture.span_batcher import PROXY_QUIET_S, SpanBatcher
    from tether.models.remote import RemoteBackend
    from tether.proxy import ProxyServer
    from tether.proxy._http_server import _Connection
    from tether.store.memory import MemoryStore
    from tether.types import RolloutSpec

    store = MemoryStore()
    await store.enqueue([RolloutSpec(input=i) for i in range(CLIENTS)])
    claimed = await store.dequeue("bench", limit=CLIENTS)
    async with SpanBatcher(store, quiet_s=PROXY_QUIET_S) as batcher:
        backend = RemoteBackend("http://127.0.0.1:9/v1", model="m", return_token_ids=True)
        backend._lean = _Upstream()  # type: ignore[assignment]
        async with ProxyServer(backend, batcher=batcher, close_backend=True) as proxy:
            opened = [proxy.attempt(r.rollout_id, a.attempt_id) for r, a in claimed]
            urls = [await attempt.__aenter__() for attempt in opened]
            paths = [url.split(str(proxy.port), 1)[1] + "/chat/completions" for url in urls]
            assert proxy._server is not None
            transports = [_Transport() for _ in paths]
            connections = []
            for transport in transports:
                connection = _Connection(proxy._server)
                connection.connection_made(transport)
                connections.append(connection)
            record: list[float] = []

            async def write_spans() -> None:  # what the batcher does between bursts, timed per span
                started = time.perf_counter()
                await batcher.flush()
                record.append((time.perf_counter() - started) / CLIENTS * 1e6)

            per_call = await _bursts(connections, _requests(paths), transports, bursts, write_spans)
            for attempt in opened:
                await attempt.__aexit__(None, None, None)
    return per_call, record


async def _floor(bursts: int) -> list[float]:
    transports = [_Transport() for _ in range(CLIENTS)]
    forwards = []
    for transport in transports:
        forward = _floor_proxy._Forward(_Upstream())  # type: ignore[arg-type]
        forward.connection_made(transport)
        forwards.append(forward)

    async def nothing() -> None:
        await asyncio.sleep(0)

    per_call = await _bursts(forwards, _requests([f"/r/{k}/v1/chat/completions" for k in range(CLIENTS)]),
                             transports, bursts, nothing)  # fmt: skip
    for forward in forwards:
        forward.connection_lost(None)
    return per_call


def _rounds(bursts: int, rounds: int = 4) -> list[int]:
    """``bursts`` split into at most ``rounds`` rounds, none empty (the paths alternate round by round)."""
    rounds = min(rounds, bursts)
    return [bursts // rounds + (k < bursts % rounds) for k in range(rounds)]


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value}: give at least 1 burst")
    return number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--bursts", type=_positive, default=1000, help="bursts of 32 calls per path, at least 1 (default 1000)"
    )
    args = parser.parse_args()
    tether, record, floor = [], [], []
    for bursts in _rounds(args.bursts):  # alternate, so that machine noise hits both alike
        calls, spans = asyncio.run(_tether(bursts))
        tether += calls
        record += spans
        floor += asyncio.run(_floor(bursts))
    median = statistics.median
    load = os.getloadavg()
    print(f"the proxy's Python per call, no sockets: {args.bursts} bursts of {CLIENTS} per path")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, load average {load[0]:.2f} {load[1]:.2f} on {os.cpu_count()} cores")
    print(f"  tether, on the answer's path   {median(tether):7.1f} us/call (best burst {min(tether):.1f})")
    print(f"  tether, the span (between)     {median(record):7.1f} us/call")
    print(f"  floor (bench/_floor_proxy.py)  {median(floor):7.1f} us/call (best burst {min(floor):.1f})")
    print(f"  ratio tether/floor on the path {median(tether) / median(floor):7.2f}x")


if __name__ == "__main__":
    main()
