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


# -- handlers ---------------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return _ok({"ok": True, "store": type(_store(request)).__name__})


async def _enqueue(request: web.Request) -> web.Response:
    specs = _wire.specs_from_wire((await _body(request)).get("specs"))
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
    stopping = asyncio.ensure_future(request.app[STOPPING_KEY].wait())
    await asyncio.wait((waiting, stopping), return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if waiting.done():
        return _ok(waiting.result())
    waiting.cancel()  # the server is stopping: end the long poll now rather than hold up the shutdown
    return error(503, "Unavailable", "the store server is stopping")


async def _add_spans(request: web.Request) -> web.Response:
    spans = _wire.spans_from_wire((await _body(request)).get("spans"))
    return _ok(await _store(request).add_spans(spans))


async def _import_rollout(request: web.Request) -> web.Response:
    item = _wire.import_from_wire((await _body(request)).get("rollout"))
    return _ok((await _store(request).import_rollout(item)).to_dict())


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

ROUTES: list[tuple[str, str, Handler]] = [
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
