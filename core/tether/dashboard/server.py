"""``tether dashboard``: serve the dashboard of a store and of the run folders under a directory."""

from __future__ import annotations

import asyncio
import errno
import os

from aiohttp import web

from tether._net import check_bind, run_until_signalled
from tether.dashboard.app import PREFIX, create_app
from tether.dashboard.sources import Sources

__all__ = ["DashboardServer", "serve", "start_dashboard"]

DEFAULT_PORT = 4800


class DashboardServer:
    """A running dashboard; ``url`` is its page. Stop with ``await stop()`` or ``async with``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}{PREFIX}/"

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> DashboardServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def start_dashboard(
    sources: Sources, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> DashboardServer:
    """Serve the dashboard of ``sources`` on ``host:port`` (0: a free port) on the running loop; the
    sources are closed when it stops."""
    check_bind(host, token, "the dashboard")
    runner = web.AppRunner(create_app(sources, token), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += " (another server has it: pick another --port, or 0 for a free one)"
        raise OSError(exc.errno, f"cannot serve the dashboard on {host}:{port}: {reason}") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    return DashboardServer(runner, host, bound)


def serve(
    store_url: str | None,
    runs: str | None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; prints the page's URL once listening."""
    check_bind(host, token, "the dashboard")
    asyncio.run(_serve(store_url, runs, host, port, token))


async def _serve(store_url: str | None, runs: str | None, host: str, port: int, token: str | None) -> None:
    sources = Sources(store_url, runs, token=token)
    server = await start_dashboard(sources, host, port, token)
    what = ", ".join(x for x in (store_url and f"store {store_url}", runs and f"runs in {runs}/") if x)
    listening = f"tether dashboard ({what or 'nothing to show'}) at {server.url}"
    await run_until_signalled(server.stop, listening, "tether dashboard stopped")
