"""The HTTP store server (``tether store serve``): any ``Store`` exposed as JSON endpoints.

Every method of ``tether.store.base.Store`` has one endpoint under ``/v1``. Bodies are JSON (orjson).
Errors come back as ``{"error": {"type": ..., "message": ...}}`` with 400 (InvalidInput), 404 (NotFound),
409 (InvalidTransition), 401 (missing or wrong bearer token), 413 (a body over ``max_body_bytes``, typed
InvalidInput: nothing was stored) or 500; ``HttpStore`` re-raises them as the same exception class with the
same message. The server binds loopback unless given a token; the token is compared as UTF-8 bytes.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from tether._net import check_bind, request_refusal, run_until_signalled, unbracket
from tether._site import RunningSite, bind
from tether.store.base import Store
from tether.store.http import _wire
from tether.store.http._routes import ROUTES, STOPPING_KEY, STORE_KEY, Handler, error

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Mount", "StoreServer", "create_app", "serve", "start_server"]

#: the largest request body the server reads (``tether store serve --max-body-mb``): span batches carry token
#: ids, so aiohttp's 1 MiB is too small, and a bigger cap lets one request hold that much of the server's memory.
#: A span batch over it is refused whole (413); ``SpanBatcher`` then writes it in halves that fit.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
_SHUTDOWN_S = 1.0  # on stop, in-flight requests (a long-polling wait) get this long before they are cut

_log = logging.getLogger("tether.store.http.server")
DASHBOARD = "/dashboard"  # tether.dashboard.app.PREFIX


# -- app --------------------------------------------------------------------------------------------------


def _errors_middleware(token: str | None, max_body_bytes: int) -> Any:
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        content_type = request.content_type if request.body_exists or request.method == "POST" else ""
        refusal = request_refusal(request, token=expected is not None, content_type=content_type)
        if refusal is not None:
            return error(refusal[0], "Forbidden" if refusal[0] == 403 else "UnsupportedMediaType", refusal[1])
        if expected is not None and not request.path.startswith(DASHBOARD):  # the pages check it themselves
            # aiohttp decodes header bytes as UTF-8 with surrogateescape: this gives the bytes back, valid or not
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                what = "wrong bearer token" if given else "missing bearer token"
                return error(401, "Unauthorized", f"{what}: send 'Authorization: Bearer <token>'")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            size = f"{request.content_length} bytes" if request.content_length is not None else "larger"
            return error(
                413,
                "InvalidInput",
                f"{request.method} {request.path}: the request body ({size}) is over this server's limit of "
                f"{max_body_bytes} bytes; nothing was stored. Send less at once (SpanBatcher retries a span batch "
                "in halves), or start the server with a larger --max-body-mb",
            )
        except web.HTTPException as exc:  # unknown route, wrong method
            return error(exc.status, "HTTPError", f"{request.method} {request.path}: {exc.reason}")
        except Exception as exc:
            type_name = _wire.error_type(exc)
            if type_name == "InternalError":
                _log.exception("%s %s failed", request.method, request.path)
                return error(500, type_name, f"{type(exc).__name__}: {exc}")
            return error(_wire.ERRORS[type_name][1], type_name, str(exc))

    return middleware


async def _on_shutdown(app: web.Application) -> None:
    app[STOPPING_KEY].set()


#: adds routes of a higher layer to the app (``tether.server`` mounts the OTLP receiver and the dashboard)
Mount = Callable[[web.Application, Store, "str | None"], None]


def create_app(
    store: Store,
    token: str | None = None,
    *,
    mounts: Sequence[Mount] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> web.Application:
    """An aiohttp application serving ``store``. With ``token``, every request needs the bearer token; a body
    over ``max_body_bytes`` is refused with 413. Each of ``mounts`` adds its routes (same token rule)."""
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_errors_middleware(token, max_body_bytes)])
    app[STORE_KEY] = store
    app[STOPPING_KEY] = asyncio.Event()
    app.on_shutdown.append(_on_shutdown)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    for mount in mounts:
        mount(app, store, token)
    return app


class StoreServer(RunningSite):
    """A running store server; ``url`` is where clients reach it. Stop with ``await stop()`` or ``async with``."""


async def start_server(
    store: Store,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    *,
    mounts: Sequence[Mount] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> StoreServer:
    """Serve ``store`` on ``host:port`` (``port=0`` picks a free port) on the running loop. An IPv6 ``host``
    may come in brackets, as in a URL."""
    host = unbracket(host)
    check_bind(host, token)
    app = create_app(store, token, mounts=mounts, max_body_bytes=max_body_bytes)
    runner, bound = await bind(app, host, port, "the store", shutdown_timeout=_SHUTDOWN_S, backlog=1024)
    return StoreServer(runner, host, bound)


def serve(
    store_url: str,
    host: str = "127.0.0.1",
    port: int = 4747,
    token: str | None = None,
    *,
    mounts: Sequence[Mount] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Open the store at ``store_url`` and serve it until SIGINT/SIGTERM; prints the URL once listening."""
    check_bind(host, token)
    asyncio.run(_serve(store_url, host, port, token, mounts, max_body_bytes))


def _describe(store_url: str, store: Store) -> str:
    """The store as the banner names it: a SQLite URL with the file it resolved to."""
    path = getattr(store, "path", None)
    if store_url.startswith("sqlite:") and path is not None and str(path) != ":memory:":
        return f"{store_url}, file {path}"
    return store_url


async def _serve(
    store_url: str, host: str, port: int, token: str | None, mounts: Sequence[Mount], max_body_bytes: int
) -> None:
    from tether.store import open_store

    store = open_store(store_url)
    try:
        server = await start_server(store, host, port, token, mounts=mounts, max_body_bytes=max_body_bytes)
        banner = f"tether store ({_describe(store_url, store)}) serving at {server.url}"
        await run_until_signalled(server.stop, banner, "tether store stopped")
    finally:
        await store.close()
