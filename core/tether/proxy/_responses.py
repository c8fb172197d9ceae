"""The proxy's HTTP plumbing on aiohttp's low-level server: its request factory and its JSON and error answers.

Errors use OpenAI's body shape (``{"error": {"message", "type", "param", "code"}}``), which OpenAI's SDKs show
as they are.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

JSON = "application/json"
#: the largest request body the proxy reads (its spans are capped lower: ``max_span_bytes``)
MAX_BODY = 256 * 1024 * 1024


def make_request(
    message: Any,
    payload: Any,
    protocol: Any,
    writer: Any,
    task: Any,
    _cls: type[web.BaseRequest] = web.BaseRequest,
) -> web.BaseRequest:
    """aiohttp's ``BaseRequest`` (no ``Application``), reading bodies of up to ``MAX_BODY`` bytes."""
    return _cls(message, payload, protocol, writer, task, task.get_loop(), client_max_size=MAX_BODY)


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON)


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An OpenAI-shaped error answer."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON, headers=headers)
