"""``tether dashboard``: serve the dashboard of a store and of the run folders under a directory."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tether._net import check_bind, run_until_signalled
from tether._site import RunningSite, bind
from tether.dashboard.app import PREFIX, create_app
from tether.dashboard.sources import Sources

__all__ = ["DashboardServer", "serve", "start_dashboard"]

DEFAULT_PORT = 4800


class DashboardServer(RunningSite):
    """A running dashboard; ``url`` is its page. Stop with ``await stop()`` or ``async with``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        super().__init__(runner, host, port, f"{PREFIX}/")


async def start_dashboard(
    sources: Sources, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> DashboardServer:
    """Serve the dashboard of ``sources`` on ``host:port`` (0: a free port) on the running loop; the
    sources are closed when it stops."""
    check_bind(host, token, "the dashboard")
    runner, bound = await bind(create_app(sources, token), host, port, "the dashboard", shutdown_timeout=1.0)
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
