"""The proxy's JSON answers, as ``_http_server.Response`` (its errors: ``tether.proxy._error_answers``)."""

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
