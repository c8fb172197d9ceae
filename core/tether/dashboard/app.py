"""The dashboard's web application: the page (hand-written HTML, CSS and JavaScript shipped in ``static/``)
and the JSON it reads, mounted under ``/dashboard/`` by ``tether dashboard`` and by ``tether store serve``.

Every list is paged here, on the server: a page of rollouts is at most ``index.MAX_LIMIT`` rows, resources
versions come a page at a time, metrics are read from a byte offset on. With a token (the store server's
rule: needed beyond loopback) every request needs it — as ``Authorization: Bearer <token>``, or a cookie
set when the page is opened once as ``/dashboard/?token=<token>``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tether import _json, spans
from tether._net import request_refusal
from tether.dashboard.index import MAX_LIMIT
from tether.dashboard.rows import parse_filters
from tether.dashboard.sources import Source, Sources, read_apo_history, read_metrics
from tether.dashboard.trace import rollout_detail
from tether.store.base import Store
from tether.store.errors import NotFound
from tether.types import Resources

__all__ = ["PREFIX", "create_app", "dashboard_app", "mount"]

PREFIX = "/dashboard"
STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "tether_dashboard_token"
_SOURCES_KEY = web.AppKey("sources", Sources)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_log = logging.getLogger("tether.dashboard")
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}


def _ok(value: Any) -> web.Response:
    return web.Response(body=_json.dumps(value), content_type="application/json", headers=_HEADERS)


def _error(status: int, type_name: str, message: str) -> web.Response:
    body = _json.dumps({"error": {"type": type_name, "message": message}})
    return web.Response(status=status, body=body, content_type="application/json", headers=_HEADERS)


def _sources(request: web.Request) -> Sources:
    return request.app[_SOURCES_KEY]


def _source(request: web.Request) -> Source:
    name = request.query.get("source")
    if not name:
        raise ValueError("query parameter 'source' is required (a name from api/sources)")
    return _sources(request).get(name)


def _int(request: web.Request, name: str, default: int, low: int = 0, high: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name!r} must be an integer, got {raw!r}") from None
    value = max(low, value)
    return min(value, high) if high is not None else value


# -- pages ------------------------------------------------------------------------------------------------


async def _page(request: web.Request) -> web.StreamResponse:
    return _static_file("index.html")


async def _static(request: web.Request) -> web.StreamResponse:
    return _static_file(request.match_info["name"])


def _static_file(name: str) -> web.StreamResponse:
    path = (STATIC / name).resolve()
    if path.parent != STATIC or not path.is_file():
        return _error(404, "NotFound", f"no file {name!r}")
    content_type = _TYPES.get(path.suffix, "application/octet-stream")
    return web.Response(body=path.read_bytes(), content_type=content_type, charset="utf-8", headers=_HEADERS)


# -- data -------------------------------------------------------------------------------------------------


async def _api_sources(request: web.Request) -> web.Response:
    sources = _sources(request)
    root = sources.runs_root
    return _ok(
        {
            "sources": [s.summary() for s in sources.all()],
            "runs_root": str(root) if root is not None else None,
        }
    )


async def _api_metrics(request: web.Request) -> web.Response:
    source = _source(request)
    path = source.metrics_path
    if path is None:
        return _ok({"records": [], "next": 0, "reset": False})
    return _ok(read_metrics(path, _int(request, "since", 0)))


def _index(source: Source) -> Any:
    index = source.index()
    if index is None:
        raise LookupError(f"{source.name} has no store: start the dashboard with --store <url>")
    return index


async def _api_rollouts(request: web.Request) -> web.Response:
    source = _source(request)
    index = _index(source)
    filters = parse_filters(dict(request.query))
    page = await index.page(
        filters, offset=_int(request, "offset", 0), limit=_int(request, "limit", 50, 1, MAX_LIMIT)
    )
    return _ok(
        {
            "rows": page.rows,
            "total": page.total,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "scanned": page.scanned,
            "exact": page.exact,
            "counts": page.counts,
            "refreshed_at": page.refreshed_at,
            "agents": page.agents,
        }
    )


async def _api_rollout(request: web.Request) -> web.Response:
    source = _source(request)
    index = _index(source)
    rollout_id = request.query.get("id", "").strip()
    if not rollout_id:
        raise ValueError("query parameter 'id' is required")
    group = await index.group(rollout_id)
    detail = await rollout_detail(index.store, rollout_id, request.query.get("attempt") or None, group)
    return _ok(detail)


async def _api_resources(request: web.Request) -> web.Response:
    source = _source(request)
    index = _index(source)
    store: Store = index.store
    latest = await store.get_resources()
    if latest is None:
        return _ok({"versions": [], "total": 0, "offset": 0, "next_offset": None})
    offset = _int(request, "offset", 0)
    limit = _int(request, "limit", 20, 1, 100)
    usage = await index.version_usage()
    scores = await _apo_scores(source, index)
    wanted = range(latest.version - offset, max(0, latest.version - offset - limit - 1), -1)
    fetched: list[Resources] = []
    for version in wanted:
        try:
            found = latest if version == latest.version else await store.get_resources(version)
        except NotFound:
            continue
        if found is not None:
            fetched.append(found)
    versions = []
    for i, resources in enumerate(fetched[:limit]):
        older = fetched[i + 1] if i + 1 < len(fetched) else None
        used = usage.get(resources.version)
        data = resources.to_dict()
        data["prompts_changed"] = older is None or older.prompts != resources.prompts
        data["rollouts"] = used.rollouts if used is not None else 0
        data["mean_reward"] = used.mean_reward if used is not None else None
        data["apo"] = scores.get(resources.version, [])
        versions.append(data)
    end = offset + limit
    return _ok(
        {
            "versions": versions,
            "total": latest.version,
            "offset": offset,
            "next_offset": end if end < latest.version else None,
        }
    )


async def _apo_scores(source: Source, index: Any) -> dict[int, list[dict[str, Any]]]:
    """APO's candidate records by resources version: from the store's record rollout, else the run folder."""
    entries: list[dict[str, Any]] = []
    for row in await index.records("apo"):
        try:
            attempts = await index.store.get_attempts(row.rollout_id)
            for attempt in attempts:
                for span in await index.store.get_spans(attempt.attempt_id):
                    if span.name == spans.APO_CANDIDATE:
                        entries.append(span.attributes)
        except NotFound:
            continue
    if not entries:
        entries = read_apo_history(source.path)
    out: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        version = entry.get("resources_version")
        if isinstance(version, int):
            keep = {
                k: entry.get(k) for k in ("candidate", "round", "score", "status", "in_beam", "failed", "edited")
            }
            out.setdefault(version, []).append(keep)
    return out


_ROUTES: list[tuple[str, str, _Handler]] = [
    ("GET", "/", _page),
    ("GET", "/static/{name}", _static),
    ("GET", "/api/sources", _api_sources),
    ("GET", "/api/metrics", _api_metrics),
    ("GET", "/api/rollouts", _api_rollouts),
    ("GET", "/api/rollout", _api_rollout),
    ("GET", "/api/resources", _api_resources),
]


# -- app --------------------------------------------------------------------------------------------------


def _raw(text: str) -> bytes:
    """A header, cookie or query value as UTF-8 to compare with the token; one that came as bytes that are not
    UTF-8 (aiohttp keeps them as surrogates) gives bytes no token has, instead of raising."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return b"\xff"


def _middleware(token: str | None) -> Any:
    expected_header = f"Bearer {token}".encode() if token else b""

    @web.middleware
    async def middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
        refused = request_refusal(request, token=bool(token))
        if refused is not None:  # a page of another site, its name rebound to 127.0.0.1, reading the runs
            return _error(refused[0], "Forbidden", refused[1])
        if token:
            given = request.query.get("token")
            if given is not None and hmac.compare_digest(_raw(given), token.encode()):
                # opened with ?token=: keep it in a cookie, and take it out of the address bar (and history)
                response = web.Response(status=303, headers={"Location": request.path, **_HEADERS})
                response.set_cookie(COOKIE, token, path=PREFIX, httponly=True, samesite="Strict")
                return response
            header = _raw(request.headers.get("Authorization", ""))
            cookie = _raw(request.cookies.get(COOKIE, ""))
            if not (hmac.compare_digest(header, expected_header) or hmac.compare_digest(cookie, token.encode())):
                return _error(
                    401, "Unauthorized", "this dashboard needs its token: open it as /dashboard/?token=<token>"
                )
        try:
            return await handler(request)
        except web.HTTPException as exc:
            return _error(exc.status, "HTTPError", f"{request.method} {request.path}: {exc.reason}")
        except NotFound as exc:
            return _error(404, "NotFound", str(exc))
        except LookupError as exc:
            return _error(404, "NotFound", str(exc.args[0]) if exc.args else "not found")
        except ValueError as exc:
            return _error(400, "InvalidInput", str(exc))
        except Exception as exc:
            _log.exception("%s %s failed", request.method, request.path)
            return _error(500, "InternalError", f"{type(exc).__name__}: {exc}")

    return middleware


def dashboard_app(sources: Sources, token: str | None = None) -> web.Application:
    """The dashboard alone (routes from ``/``); ``mount`` and ``create_app`` put it under ``/dashboard/``."""
    app = web.Application(middlewares=[_middleware(token)])
    app[_SOURCES_KEY] = sources

    async def _close(_: web.Application) -> None:
        await sources.close()

    app.on_cleanup.append(_close)
    for method, path, handler in _ROUTES:
        app.router.add_route(method, path, handler)
    return app


async def _to_dashboard(request: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": PREFIX + "/"})


def mount(app: web.Application, sources: Sources | Store, token: str | None = None) -> None:
    """Serve the dashboard of ``sources`` (or of one store) under ``/dashboard/`` of ``app``; ``/`` and
    ``/dashboard`` lead there."""
    if not isinstance(sources, Sources):
        sources = Sources.of_store(sources)
    app.add_subapp(PREFIX, dashboard_app(sources, token))
    app.router.add_get(PREFIX, _to_dashboard)
    app.router.add_get("/", _to_dashboard)


def create_app(sources: Sources, token: str | None = None) -> web.Application:
    """An application serving only the dashboard (``tether dashboard``)."""
    app = web.Application()
    mount(app, sources, token)
    return app
