"""The floor for ``bench/proxy.py --floor``: the least an asyncio HTTP proxy can do per call, measured alike.

A hand-written ``asyncio.Protocol`` server that reads each request's head and ``Content-Length`` body and
forwards the body bytes unchanged to the fake LLM over ``tether._http11`` (the keep-alive client tether's proxy
uses upstream), then writes the upstream's body back with a fixed head. No JSON is parsed, nothing is validated
or recorded: what any Python proxy pays for its two HTTP hops (four socket syscalls, the event loop) and
nothing else. Not a proxy to use: it answers every request with the upstream's body as a 200, closes on
anything it cannot read, and serves only ``POST .../chat/completions`` bodies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether._http11 import Http11Pool

_HEAD = b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class _Forward(asyncio.Protocol):
    def __init__(self, pool: Http11Pool) -> None:
        self._pool = pool
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self._buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self._buffer) < end + 4 + length:
                return
            self._queue.put_nowait(self._buffer[end + 4 : end + 4 + length])
            self._buffer = self._buffer[end + 4 + length :]

    async def _serve(self) -> None:  # one request at a time per connection, in order (HTTP/1.1)
        assert self._transport is not None
        while True:
            body = await self._queue.get()
            status, answer = await self._pool.request("POST", "/chat/completions", body)
            self._transport.write(_HEAD % (status, len(answer)) + answer)


def serve(fake_url: str, queue: Any, urls: int) -> None:
    """Serve in front of ``fake_url``; put ``urls`` base URLs (all the same server) on ``queue``."""

    async def main() -> None:
        pool = Http11Pool(fake_url, {"Content-Type": "application/json"})
        server = await asyncio.get_running_loop().create_server(lambda: _Forward(pool), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        queue.put([f"http://127.0.0.1:{port}/r/{k}/v1" for k in range(urls)])
        await asyncio.Event().wait()

    asyncio.run(main())
