"""What the store server (``tether.store.http.server``) and the dashboard (``tether.dashboard.server``) do alike
around their aiohttp app: bind it (an error naming the fix when the address cannot be had) and hold it while
it runs. Who they refuse and how a server command runs until signalled: ``tether._net``."""

from __future__ import annotations

import errno
import os
import socket
from typing import Self

from aiohttp import web


class RunningSite:
    """A running app; ``url`` is where it is reached (``path`` after the address). Stop with ``await stop()`` or
    ``async with``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, path: str = "") -> None:
        self._runner = runner
        self.host = host
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}{path}"

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def bind(
    app: web.Application, host: str, port: int, what: str, *, shutdown_timeout: float, backlog: int = 128
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port) on the running loop; its runner and the port it got.
    ``OSError`` naming ``what`` (``"the store"``) and the fix when the address cannot be had."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=backlog)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if isinstance(exc, socket.gaierror):  # its errno is getaddrinfo's, which os.strerror does not know
            reason = f"no address for host {host!r} ({exc.strerror})"
        else:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += " (another server has it: pick another --port, or 0 for a free one)"
        raise OSError(exc.errno, f"cannot serve {what} on {host}:{port}: {reason}") from None
    return runner, runner.addresses[0][1] if runner.addresses else port
