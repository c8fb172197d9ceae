"""The proxy's answers: JSON bodies and OpenAI-shaped errors, as ``_http_server.Response``.

Errors use OpenAI's body shape (``{"error": {"message", "type", "param", "code"}}``), which OpenAI's SDKs show
as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from tether.proxy._http_server import Response

if TYPE_CHECKING:
    from tether.models.base import ModelBackend

JSON = "application/json"
#: the largest request body the proxy reads (its spans are capped lower: ``max_span_bytes``)
MAX_BODY = 256 * 1024 * 1024


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status)


def models_list(backend: ModelBackend) -> Response:
    """``GET /v1/models``: the one model the backend serves."""
    name = getattr(backend, "model", None)  # a model id on remote backends; maybe a module elsewhere
    if not isinstance(name, str) or not name:
        name = backend.name or "tether"
    return json_response(
        {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tether"}]}
    )


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """An OpenAI-shaped error answer."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Response(orjson.dumps(body), status, JSON, headers)
