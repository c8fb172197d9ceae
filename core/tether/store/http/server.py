"""The HTTP store server (``tether store serve``): any ``Store`` exposed as JSON endpoints.

Every method of ``tether.store.base.Store`` has one endpoint under ``/v1``. Bodies are JSON (orjson).
Errors come back as ``{"error": {"type": ..., "message": ...}}`` with 400 (InvalidInput), 404 (NotFound),
409 (InvalidTransition), 401 (missing or wrong bearer token), 413 (a body over ``max_body_bytes``, typed
InvalidInput: nothing was stored) or 500; ``HttpStore`` re-raises them as the same exception class with the
same message. The server binds loopback unless given a token; the token is compared as UTF-8 bytes.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from tether import _json
from tether._net import check_bind, local_address, refusal, unbracket
from tether.store.base import InvalidInput, Store
from tether.store.http import _wire
from tether.store.rollout_query import RolloutQuery

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Mount", "StoreServer", "create_app", "serve", "start_server"]

#: the largest request body the server reads (``tether store serve --max-body-mb``): span batches carry token
#: ids, so aiohttp's 1 MiB is too small, and a bigger cap lets one request hold that much of the server's memory.
#: A span batch over it is refused whole (413); ``SpanBatcher`` then writes it in halves that fit.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_WAIT_S = 60.0  # a wait request is a long poll; clients loop for longer waits
_SHUTDOWN_S = 1.0  # on stop, in-flight requests (a long-polling wait) get this long before they are cut

_log = logging.getLogger("tether.store.http.server")
_STORE_KEY = web.AppKey("store", Store)
_STOPPING_KEY = web.AppKey("stopping", asyncio.Event)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DASHBOARD = "/dashboard"  # tether.dashboard.app.PREFIX


def _ok(value: Any) -> web.Response:
    return web.Response(body=_json.dumps(value), content_type="application/json")


def _error(status: int, type_name: str, message: str) -> web.Response:
    body = _json.dumps({"error": {"type": type_name, "message": message}})
    return web.Response(status=status, body=body, content_type="application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        data = _json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    return _wire.body_object(data)


def _store(request: web.Request) -> Store:
    return request.app[_STORE_KEY]


def _int_query(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"query parameter {name!r} must be an integer, got {raw!r}") from None


# -- handlers ---------------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return _ok({"ok": True, "store": type(_store(request)).__name__})


async def _enqueue(request: web.Request) -> web.Response:
    body = await _body(request)
    specs = _wire.specs_from_wire(body.get("specs"))
    return _ok(await _store(request).enqueue(specs))


async def _dequeue(request: web.Request) -> web.Response:
    body = await _body(request)
    worker_id = _wire.get_field(body, "worker_id", (str,))
    limit = _wire.get_field(body, "limit", (int,), 1)
    return _ok(await _store(request).dequeue(worker_id, limit))


async def _finish_attempt(request: web.Request) -> web.Response:
    body = await _body(request)
    status = _wire.get_field(body, "status", (str,))
    rollout = await _store(request).finish_attempt(
        request.match_info["attempt_id"],
        status,  # the store checks it (validate_finish_status) like any caller's
        output=body.get("output"),
        reward=body.get("reward"),
        error=_wire.get_field(body, "error", (str, type(None)), None),
    )
    return _ok(rollout)


async def _heartbeat(request: web.Request) -> web.Response:
    await _store(request).heartbeat(request.match_info["attempt_id"])
    return _ok(None)


async def _requeue_stale(request: web.Request) -> web.Response:
    body = await _body(request)
    now = _wire.get_field(body, "now", (int, float, type(None)), None)
    return _ok(await _store(request).requeue_stale(now))


async def _cancel_rollout(request: web.Request) -> web.Response:
    return _ok(await _store(request).cancel_rollout(request.match_info["rollout_id"]))


async def _get_rollout(request: web.Request) -> web.Response:
    return _ok(await _store(request).get_rollout(request.match_info["rollout_id"]))


async def _list_rollouts(request: web.Request) -> web.Response:
    body = await _body(request)
    status = body.get("status")
    mode = body.get("mode")
    rollouts = await _store(request).list_rollouts(
        status=None if status is None else _wire.rollout_status_from_wire(status),
        mode=None if mode is None else _wire.mode_from_wire(mode),
        rollout_ids=_wire.str_list(body, "rollout_ids"),
        limit=_wire.get_field(body, "limit", (int, type(None)), None),
    )
    return _ok(rollouts)


async def _query_rollouts(request: web.Request) -> web.Response:
    page = await _store(request).query_rollouts(RolloutQuery.from_dict(await _body(request)))
    return _ok(page.to_dict())


async def _count_rollouts(request: web.Request) -> web.Response:
    mode = (await _body(request)).get("mode")
    return _ok(await _store(request).count_rollouts(mode=None if mode is None else _wire.mode_from_wire(mode)))


async def _usage_by_version(request: web.Request) -> web.Response:
    usage = await _store(request).usage_by_version()
    return _ok([[version, *u.to_list()] for version, u in sorted(usage.items())])


async def _get_attempts(request: web.Request) -> web.Response:
    return _ok(await _store(request).get_attempts(request.match_info["rollout_id"]))


async def _wait(request: web.Request) -> web.Response:
    body = await _body(request)
    ids = _wire.str_list(body, "rollout_ids", required=True)
    timeout = _wire.get_field(body, "timeout", (int, float, type(None)), None)
    poll_s = _wire.get_field(body, "poll_s", (int, float), 0.05)
    timeout = MAX_WAIT_S if timeout is None else min(max(timeout, 0.0), MAX_WAIT_S)
    poll_s = min(max(poll_s, 0.005), 1.0)
    waiting = asyncio.ensure_future(_store(request).wait_for_rollouts(ids or [], timeout=timeout, poll_s=poll_s))
    stopping = asyncio.ensure_future(request.app[_STOPPING_KEY].wait())
    await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if waiting.done():
        return _ok(waiting.result())
    waiting.cancel()  # the server is stopping: end the long poll now rather than hold up the shutdown
    return _error(503, "Unavailable", "the store server is stopping")


async def _add_spans(request: web.Request) -> web.Response:
    body = await _body(request)
    spans = _wire.spans_from_wire(body.get("spans"))
    return _ok(await _store(request).add_spans(spans))


async def _import_rollout(request: web.Request) -> web.Response:
    body = await _body(request)
    return _ok((await _store(request).import_rollout(_wire.import_from_wire(body.get("rollout")))).to_dict())


async def _get_spans(request: web.Request) -> web.Response:
    since = _int_query(request, "since", 0)
    return _ok(await _store(request).get_spans(request.match_info["attempt_id"], since=since))


async def _add_resources(request: web.Request) -> web.Response:
    body = await _body(request)
    resources = await _store(request).add_resources(
        llm=_wire.llm_from_wire(body.get("llm")), prompts=_wire.prompts_from_wire(body.get("prompts"))
    )
    return _ok(resources)


async def _get_resources(request: web.Request) -> web.Response:
    raw = request.match_info.get("version")
    if raw is None:
        return _ok(await _store(request).get_resources())
    try:
        version = int(raw)
    except ValueError:
        raise InvalidInput(f"resources version must be an integer, got {raw!r}") from None
    return _ok(await _store(request).get_resources(version))


async def _harvest(request: web.Request) -> web.Response:
    body = await _body(request)
    return _ok(await _store(request).harvest(_wire.str_list(body, "rollout_ids")))


_ID = "{%s:[^/]*}"  # ids are percent-quoted by the client; an empty id still routes (and is not found)

_ROUTES: list[tuple[str, str, _Handler]] = [
    ("GET", "/v1/health", _health),
    ("POST", "/v1/rollouts", _enqueue),
    ("POST", "/v1/rollouts/list", _list_rollouts),
    ("POST", "/v1/rollouts/query", _query_rollouts),
    ("POST", "/v1/rollouts/count", _count_rollouts),
    ("GET", "/v1/rollouts/usage", _usage_by_version),
    ("POST", "/v1/rollouts/wait", _wait),
    ("GET", "/v1/rollouts/" + _ID % "rollout_id", _get_rollout),
    ("POST", "/v1/rollouts/" + _ID % "rollout_id" + "/cancel", _cancel_rollout),
    ("GET", "/v1/rollouts/" + _ID % "rollout_id" + "/attempts", _get_attempts),
    ("POST", "/v1/dequeue", _dequeue),
    ("POST", "/v1/requeue_stale", _requeue_stale),
    ("POST", "/v1/attempts/" + _ID % "attempt_id" + "/finish", _finish_attempt),
    ("POST", "/v1/attempts/" + _ID % "attempt_id" + "/heartbeat", _heartbeat),
    ("GET", "/v1/attempts/" + _ID % "attempt_id" + "/spans", _get_spans),
    ("POST", "/v1/spans", _add_spans),
    ("POST", "/v1/imports", _import_rollout),
    ("POST", "/v1/resources", _add_resources),
    ("GET", "/v1/resources", _get_resources),
    ("GET", "/v1/resources/{version}", _get_resources),
    ("POST", "/v1/harvest", _harvest),
]


# -- app --------------------------------------------------------------------------------------------------


def _errors_middleware(token: str | None, max_body_bytes: int) -> Any:
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
        refused = refusal(
            request.method,
            request.headers.get("Host"),
            request.headers.get("Origin"),
            request.content_type if request.body_exists or request.method == "POST" else "",
            local_address(request.transport),
            token=expected is not None,
        )
        if refused is not None:
            return _error(refused[0], "Forbidden" if refused[0] == 403 else "UnsupportedMediaType", refused[1])
        if expected is not None and not request.path.startswith(DASHBOARD):  # the pages check it themselves
            # aiohttp decodes header bytes as UTF-8 with surrogateescape: this gives the bytes back, valid or not
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                what = "wrong bearer token" if given else "missing bearer token"
                return _error(401, "Unauthorized", f"{what}: send 'Authorization: Bearer <token>'")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            size = f"{request.content_length} bytes" if request.content_length is not None else "larger"
            return _error(
                413,
                "InvalidInput",
                f"{request.method} {request.path}: the request body ({size}) is over this server's limit of "
                f"{max_body_bytes} bytes; nothing was stored. Send less at once (SpanBatcher retries a span batch "
                "in halves), or start the server with a larger --max-body-mb",
            )
        except web.HTTPException as exc:  # unknown route, wrong method
            return _error(exc.status, "HTTPError", f"{request.method} {request.path}: {exc.reason}")
        except Exception as exc:
            type_name = _wire.error_type(exc)
            if type_name == "InternalError":
                _log.exception("%s %s failed", request.method, request.path)
                return _error(500, type_name, f"{type(exc).__name__}: {exc}")
            return _error(_wire.ERRORS[type_name][1], type_name, str(exc))

    return middleware


async def _on_shutdown(app: web.Application) -> None:
    app[_STOPPING_KEY].set()


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
    app[_STORE_KEY] = store
    app[_STOPPING_KEY] = asyncio.Event()
    app.on_shutdown.append(_on_shutdown)
    for method, path, handler in _ROUTES:
        app.router.add_route(method, path, handler)
    for mount in mounts:
        mount(app, store, token)
    return app


class StoreServer:
    """A running store server; ``url`` is where clients reach it. Stop with ``await stop()`` or ``async with``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> StoreServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


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
    runner = web.AppRunner(
        create_app(store, token, mounts=mounts, max_body_bytes=max_body_bytes),
        access_log=None,
        handle_signals=False,
        shutdown_timeout=_SHUTDOWN_S,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
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
        raise OSError(exc.errno, f"cannot serve the store on {host}:{port}: {reason}") from None
    bound_port = runner.addresses[0][1] if runner.addresses else port
    return StoreServer(runner, host, bound_port)


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
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"tether store ({_describe(store_url, store)}) serving at {server.url}", flush=True)
        try:
            await stop.wait()
        finally:
            await server.stop()
            print("tether store stopped", flush=True)
    finally:
        await store.close()
