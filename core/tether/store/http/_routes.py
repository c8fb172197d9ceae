"""The HTTP store server's routes: one JSON endpoint under ``/v1`` per method of ``tether.store.base.Store``,
each reading its arguments from the request and answering with the store's result (``tether.store.http.server``
builds the app around them)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tether import _json
from tether.store.base import Store
from tether.store.errors import InvalidInput
from tether.store.http import _wire
from tether.store.rollout_query import RolloutQuery

MAX_WAIT_S = 60.0  # a wait request is a long poll; clients loop for longer waits

STORE_KEY = web.AppKey("store", Store)
STOPPING_KEY = web.AppKey("stopping", asyncio.Event)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _ok(value: Any) -> web.Response:
    return web.Response(body=_json.dumps(value), content_type="application/json")


def error(status: int, type_name: str, message: str) -> web.Response:
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


async def _field(request: web.Request, name: str) -> Any:
    """One field of the request's JSON body (None if it is absent)."""
    return (await _body(request)).get(name)


def _store(request: web.Request) -> Store:
    return request.app[STORE_KEY]


def _int_query(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"query parameter {name!r} must be an integer, got {raw!r}") from None


#: (method, path, handler) of every endpoint, in the order they are matched (``_route`` adds them)
ROUTES: list[tuple[str, str, Handler]] = []


def _route(method: str, path: str) -> Callable[[Handler], Handler]:
    """Serve the decorated handler at ``method`` ``path``. Ids in a path (``{rollout_id}``, ``{attempt_id}``) are
    percent-quoted by the client; an empty id still routes (and is not found)."""
    for name in ("rollout_id", "attempt_id"):
        path = path.replace(f"{{{name}}}", f"{{{name}:[^/]*}}")

    def add(handler: Handler) -> Handler:
        ROUTES.append((method, path, handler))
        return handler

    return add


# -- handlers ---------------------------------------------------------------------------------------------


@_route("GET", "/v1/health")
async def _health(request: web.Request) -> web.Response:
    return _ok({"ok": True, "store": type(_store(request)).__name__})


@_route("POST", "/v1/rollouts")
async def _enqueue(request: web.Request) -> web.Response:
    return _ok(await _store(request).enqueue(_wire.specs_from_wire(await _field(request, "specs"))))


@_route("POST", "/v1/rollouts/list")
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


@_route("POST", "/v1/rollouts/query")
async def _query_rollouts(request: web.Request) -> web.Response:
    page = await _store(request).query_rollouts(RolloutQuery.from_dict(await _body(request)))
    return _ok(page.to_dict())


@_route("POST", "/v1/rollouts/count")
async def _count_rollouts(request: web.Request) -> web.Response:
    mode = await _field(request, "mode")
    return _ok(await _store(request).count_rollouts(mode=None if mode is None else _wire.mode_from_wire(mode)))


@_route("GET", "/v1/rollouts/usage")
async def _usage_by_version(request: web.Request) -> web.Response:
    usage = await _store(request).usage_by_version()
    return _ok([[version, *u.to_list()] for version, u in sorted(usage.items())])


@_route("POST", "/v1/rollouts/wait")
async def _wait(request: web.Request) -> web.Response:
    body = await _body(request)
    ids = _wire.str_list(body, "rollout_ids", required=True)
    timeout = _wire.get_field(body, "timeout", (int, float, type(None)), None)
    poll_s = _wire.get_field(body, "poll_s", (int, float), 0.05)
    timeout = MAX_WAIT_S if timeout is None else min(max(timeout, 0.0), MAX_WAIT_S)
    poll_s = min(max(poll_s, 0.005), 1.0)
    waiting = asyncio.ensure_future(_store(request).wait_for_rollouts(ids or [], timeout=timeout, poll_s=poll_s))
    stopping = asyncio.ensure_future(request.app[STOPPING_KEY].wait())
    await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if waiting.done():
        return _ok(waiting.result())
    waiting.cancel()  # the server is stopping: end the long poll now rather than hold up the shutdown
    return error(503, "Unavailable", "the store server is stopping")


@_route("GET", "/v1/rollouts/{rollout_id}")
async def _get_rollout(request: web.Request) -> web.Response:
    return _ok(await _store(request).get_rollout(request.match_info["rollout_id"]))


@_route("POST", "/v1/rollouts/{rollout_id}/cancel")
async def _cancel_rollout(request: web.Request) -> web.Response:
    return _ok(await _store(request).cancel_rollout(request.match_info["rollout_id"]))


@_route("GET", "/v1/rollouts/{rollout_id}/attempts")
async def _get_attempts(request: web.Request) -> web.Response:
    return _ok(await _store(request).get_attempts(request.match_info["rollout_id"]))


@_route("POST", "/v1/dequeue")
async def _dequeue(request: web.Request) -> web.Response:
    body = await _body(request)
    worker_id = _wire.get_field(body, "worker_id", (str,))
    limit = _wire.get_field(body, "limit", (int,), 1)
    return _ok(await _store(request).dequeue(worker_id, limit))


@_route("POST", "/v1/requeue_stale")
async def _requeue_stale(request: web.Request) -> web.Response:
    body = await _body(request)
    now = _wire.get_field(body, "now", (int, float, type(None)), None)
    return _ok(await _store(request).requeue_stale(now))


@_route("POST", "/v1/attempts/{attempt_id}/finish")
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


@_route("POST", "/v1/attempts/{attempt_id}/heartbeat")
async def _heartbeat(request: web.Request) -> web.Response:
    await _store(request).heartbeat(request.match_info["attempt_id"])
    return _ok(None)


@_route("GET", "/v1/attempts/{attempt_id}/spans")
async def _get_spans(request: web.Request) -> web.Response:
    since = _int_query(request, "since", 0)
    return _ok(await _store(request).get_spans(request.match_info["attempt_id"], since=since))


@_route("POST", "/v1/spans")
async def _add_spans(request: web.Request) -> web.Response:
    return _ok(await _store(request).add_spans(_wire.spans_from_wire(await _field(request, "spans"))))


@_route("POST", "/v1/imports")
async def _import_rollout(request: web.Request) -> web.Response:
    item = _wire.import_from_wire(await _field(request, "rollout"))
    return _ok((await _store(request).import_rollout(item)).to_dict())


@_route("POST", "/v1/resources")
async def _add_resources(request: web.Request) -> web.Response:
    body = await _body(request)
    resources = await _store(request).add_resources(
        llm=_wire.llm_from_wire(body.get("llm")), prompts=_wire.prompts_from_wire(body.get("prompts"))
    )
    return _ok(resources)


@_route("GET", "/v1/resources/{version}")
@_route("GET", "/v1/resources")
async def _get_resources(request: web.Request) -> web.Response:
    raw = request.match_info.get("version")
    if raw is None:
        return _ok(await _store(request).get_resources())
    try:
        version = int(raw)
    except ValueError:
        raise InvalidInput(f"resources version must be an integer, got {raw!r}") from None
    return _ok(await _store(request).get_resources(version))


@_route("POST", "/v1/harvest")
async def _harvest(request: web.Request) -> web.Response:
    body = await _body(request)
    return _ok(await _store(request).harvest(_wire.str_list(body, "rollout_ids")))
