"""The proxy's error answers, each one counted in ``failures``: a request it cannot read, a URL or method it
does not serve, a backend with no call free (503, retried by OpenAI clients).

They use OpenAI's body shape (``{"error": {"message", "type", "param", "code"}}``), which OpenAI's SDKs show as
they are."""

from __future__ import annotations

import orjson

from tether.proxy._http_server import Request, Response
from tether.proxy._responses import JSON

_ENDPOINTS = (
    "the proxy serves POST /r/{rollout_id}/{attempt_id}/v1/chat/completions and .../v1/responses (and both "
    "without the /r/... prefix outside a rollout), GET .../v1/models and GET /health"
)


class ErrorAnswers:
    """What ``ProxyServer`` (and ``tether serve``'s server) answer when a call cannot be served."""

    failures: int  # calls answered with an error
    max_concurrent_calls: int
    queue_timeout_s: float

    def _overloaded(self) -> Response:
        return self._error(
            503,
            f"the proxy has {self.max_concurrent_calls} calls in flight to the model backend "
            f"(max_concurrent_calls) and none ended within {self.queue_timeout_s:g} s: the backend is slow or "
            "hanging; retry later, or raise max_concurrent_calls",
            kind="server_error",
            code="overloaded",
            headers={"Retry-After": "1"},
        )

    def _error(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """An OpenAI-shaped error answer."""
        self.failures += 1
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return Response(orjson.dumps(body), status, JSON, headers)

    def _unreadable(self, status: int, why: str) -> Response:
        """The answer to a request the HTTP server could not read (malformed, too large)."""
        code = "request_too_large" if status == 413 else None
        return self._error(status, f"the request cannot be read: {why}", code=code)

    def _unknown(self, request: Request, why: str) -> Response:
        return self._error(404, f"{request.method} {request.path}: {why}; {_ENDPOINTS}", code="unknown_url")

    def _not_allowed(self, request: Request, allow: str) -> Response:
        message = (
            f"{request.method} {request.path}: this endpoint takes {allow.replace(',', ' or ')}; {_ENDPOINTS}"
        )
        return self._error(405, message, code="method_not_allowed", headers={"Allow": allow})
