"""The store server as ``tether store serve`` runs it: the store's JSON routes (``tether.store.http.server``)
with the OTLP trace receiver (``POST /v1/traces``) and the dashboard (``/dashboard/``) mounted beside them. It sits
above ``store``, ``otel`` and ``dashboard`` so that none of them reaches up to another; the session's own store
server for Ray runners mounts nothing.
"""

from __future__ import annotations

from aiohttp import web

from tether.store.base import Store
from tether.store.http import server as http_server
from tether.store.http.server import DEFAULT_MAX_BODY_BYTES, Mount, StoreServer

__all__ = ["mounts", "serve", "start_server"]


def _mount_otlp(app: web.Application, store: Store, token: str | None) -> None:
    from tether.otel.receiver import mount

    mount(app, store)


def _mount_dashboard(app: web.Application, store: Store, token: str | None) -> None:
    from tether.dashboard.app import mount

    mount(app, store, token)


def mounts(*, dashboard: bool = True) -> list[Mount]:
    """What ``tether store serve`` adds to the store's routes: the OTLP receiver, and the dashboard."""
    return [_mount_otlp, _mount_dashboard] if dashboard else [_mount_otlp]


async def start_server(
    store: Store,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    *,
    dashboard: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> StoreServer:
    """``tether.store.http.server.start_server`` with the receiver and (by default) the dashboard mounted."""
    mounted = mounts(dashboard=dashboard)
    return await http_server.start_server(store, host, port, token, mounts=mounted, max_body_bytes=max_body_bytes)


def serve(
    store_url: str,
    host: str = "127.0.0.1",
    port: int = 4747,
    token: str | None = None,
    *,
    dashboard: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve the store at ``store_url`` as ``tether store serve`` does, until SIGINT/SIGTERM."""
    http_server.serve(
        store_url, host, port, token, mounts=mounts(dashboard=dashboard), max_body_bytes=max_body_bytes
    )
