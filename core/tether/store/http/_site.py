"""What the store server (``tether.store.http.server``) and the dashboard (``tether.dashboard.server``) do alike
around their aiohttp app: refuse what a page of another site sends, bind the app (an error naming the fix
when the address cannot be had), hold it while it runs, and serve until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
from typing import Self

from aiohttp import web

from tether._net import local_address, refusal


def refused(request: web.Request, content_type: str, *, token: bool) -> tuple[int, str] | None:
    """``tether._net.refusal`` of ``request`` (its method, Host, Origin and socket; ``content_type`` as the
    server reads it): the status and message to refuse it with, or None."""
    return refusal(
        request.method,
        request.headers.get("Host"),
        request.headers.get("Origin"),
        content_type,
        local_address(request.transport),
        token=token,
    )


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


async def serve_until_signalled(site: RunningSite, banner: str, stopped: str) -> None:
    """Print ``banner`` once SIGINT and SIGTERM are handled, wait for one of them, stop ``site`` and print
    ``stopped``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(banner, flush=True)
    try:
        await stop.wait()
    finally:
        await site.stop()
        print(stopped, flush=True)
