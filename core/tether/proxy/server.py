"""The proxy server: an OpenAI-compatible endpoint per rollout attempt, in front of one model backend.

``POST /r/{rollout_id}/{attempt_id}/v1/chat/completions`` validates the request, asks the backend, answers
(as JSON or as an SSE stream synthesised from the whole completion) and submits one ``llm`` span for that
attempt to a ``SpanBatcher``. ``/v1/chat/completions`` without the prefix serves the same backend
unrecorded (for calls made outside any rollout). Errors use OpenAI's body shape: 400 for bad requests,
404 for an unknown rollout or attempt, 502 when the backend fails; a failed call stores nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from aiohttp import web

from tether.context import AGENT_HEADER, CALL_ID_HEADER
from tether.models.base import BackendError, BadRequest, ChatRequest, ModelBackend
from tether.proxy.capture import completion_json, llm_span
from tether.proxy.request import InvalidRequest, parse_chat_request
from tether.proxy.sse import sse_body
from tether.span_batcher import SpanBatcher
from tether.store.base import NotFound, Store
from tether.types import new_id

log = logging.getLogger(__name__)

_JSON = "application/json"
_MAX_BODY = 256 * 1024 * 1024


class ProxyServer:
    """Serve ``backend`` on ``host:port`` (0: a free port) and record each call as a span in ``store``.

    ``start`` also starts the backend (backends' ``start`` is idempotent); ``stop`` flushes the spans and
    closes the backend only if ``close_backend`` is true (the caller usually owns it).
    """

    def __init__(
        self,
        store: Store,
        backend: ModelBackend,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        batcher: SpanBatcher | None = None,
        check_attempts: bool = True,
        close_backend: bool = False,
    ) -> None:
        self.store = store
        self.backend = backend
        self.host = host
        self.port = port
        self.batcher = batcher or SpanBatcher(store)
        self.check_attempts = check_attempts
        self.close_backend = close_backend
        self.calls = 0  # successful recorded calls
        self.failures = 0  # calls answered with an error
        self._known_attempts: set[tuple[str, str]] = set()
        self._runner: web.BaseRunner | None = None
        #: per-rollout sampling that overrides the agent's own (set by the runner from the rollout's
        #: resources: greedy evaluation, the training temperature); keys: temperature, top_p, max_tokens, seed
        self.sampling_overrides: dict[str, dict[str, Any]] = {}

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> ProxyServer:
        if self._runner is not None:
            return self
        await self.backend.start()
        await self.batcher.start()
        # aiohttp's low-level server: one handler that routes by hand. The Application's router, middleware
        # chain and Request subclass cost ~10% of the proxy's CPU per call for five fixed routes.
        server = web.Server(self._route, request_factory=_make_request)
        runner = web.ServerRunner(server, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("the proxy is not started: `await proxy.start()` or `async with proxy:`")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url_for(self, rollout_id: str, attempt_id: str) -> str:
        """The OpenAI base URL (ending in ``/v1``) whose calls are recorded for this rollout attempt."""
        return f"{self.url}/r/{rollout_id}/{attempt_id}/v1"

    async def flush(self) -> None:
        """Return when every call answered so far is in the store."""
        await self.batcher.flush()

    async def stop(self) -> None:
        """Stop serving, write the pending spans, and close the backend if asked to. Idempotent."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        await self.batcher.close()
        if self.close_backend:
            await self.backend.close()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers -----------------------------------------------------------------------------------------

    async def _route(self, request: web.BaseRequest) -> web.StreamResponse:
        """``POST [/r/{rid}/{aid}]/v1/chat/completions``, ``GET [/r/{rid}/{aid}]/v1/models``, ``GET /health``."""
        path = request.path
        rollout_id = attempt_id = None
        if path.startswith("/r/"):
            parts = path.split("/", 4)  # "", "r", rid, aid, rest
            if len(parts) < 5 or not parts[2] or not parts[3]:
                return _not_found()
            rollout_id, attempt_id, path = parts[2], parts[3], "/" + parts[4]
        method = request.method
        if path == "/v1/chat/completions":
            if method != "POST":
                return _not_allowed("POST")
            return await self._chat(request, rollout_id, attempt_id)
        if path == "/v1/models" or (path == "/health" and rollout_id is None):
            if method not in ("GET", "HEAD"):
                return _not_allowed("GET,HEAD")
            return await (self._models(request) if path == "/v1/models" else self._health(request))
        return _not_found()

    async def _health(self, request: web.BaseRequest) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.BaseRequest) -> web.Response:
        name = getattr(self.backend, "model", None)  # a model id on remote backends; maybe a module elsewhere
        if not isinstance(name, str) or not name:
            name = self.backend.name or "tether"
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "tether"}]
        return _json({"object": "list", "data": data})

    async def _chat(
        self, request: web.BaseRequest, rollout_id: str | None, attempt_id: str | None
    ) -> web.Response:
        start_time = time.time()
        started = time.perf_counter()
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return self._error(400, f"the request body is not valid JSON ({exc})")
        try:
            chat, stream = parse_chat_request(body)
        except InvalidRequest as exc:
            return self._error(400, str(exc), param=exc.param)
        if rollout_id is not None and attempt_id is not None and self.check_attempts:
            problem = await self._check_attempt(rollout_id, attempt_id)
            if problem:
                return self._error(404, problem, code="unknown_attempt")
        if rollout_id is not None and rollout_id in self.sampling_overrides:
            _apply_sampling(chat, self.sampling_overrides[rollout_id])
        call_id = request.headers.get(CALL_ID_HEADER) or new_id("call")
        try:
            result = await self.backend.chat(chat)
            completion = completion_json(result, f"chatcmpl-{call_id}", bool(chat.extra.get("logprobs")))
            payload = orjson.dumps(completion)
        except BadRequest as exc:
            return self._error(400, f"the model backend rejected the request: {exc}")
        except BackendError as exc:
            return self._error(502, f"the model backend failed: {exc}", kind="upstream_error")
        except Exception as exc:
            log.exception("model backend %s raised", type(self.backend).__name__)
            return self._error(502, f"the model backend raised {type(exc).__name__}: {exc}", kind="upstream_error")
        latency_ms = (time.perf_counter() - started) * 1000.0
        if rollout_id is not None and attempt_id is not None:
            span = llm_span(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                agent_name=request.headers.get(AGENT_HEADER) or None,
                call_id=call_id,
                raw_request=raw,
                request=chat,
                stream=stream,
                result=result,
                response_payload=payload,
                start_time=start_time,
                latency_ms=latency_ms,
            )
            self.batcher.submit(span)
            self.calls += 1
        if stream:
            return web.Response(
                body=sse_body(completion), content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        return web.Response(body=payload, content_type=_JSON)

    async def _check_attempt(self, rollout_id: str, attempt_id: str) -> str | None:
        """None if the attempt belongs to the rollout (cached after the first success), else why not."""
        if (rollout_id, attempt_id) in self._known_attempts:
            return None
        try:
            attempts = await self.store.get_attempts(rollout_id)
        except NotFound:
            return f"unknown rollout {rollout_id!r}: use the URL from ProxyServer.url_for(rollout_id, attempt_id)"
        if not any(a.attempt_id == attempt_id for a in attempts):
            return f"attempt {attempt_id!r} is not an attempt of rollout {rollout_id!r}"
        self._known_attempts.add((rollout_id, attempt_id))
        return None

    def _error(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> web.Response:
        self.failures += 1
        return _json({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


def _apply_sampling(chat: ChatRequest, sampling: dict[str, Any]) -> None:
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        if sampling.get(key) is not None:
            setattr(chat, key, sampling[key])


def _make_request(
    message: Any,
    payload: Any,
    protocol: Any,
    writer: Any,
    task: Any,
    _cls: type[web.BaseRequest] = web.BaseRequest,
) -> web.BaseRequest:
    return _cls(message, payload, protocol, writer, task, task.get_loop(), client_max_size=_MAX_BODY)


def _not_found() -> web.Response:
    return web.Response(status=404, text="404: Not Found")


def _not_allowed(allow: str) -> web.Response:
    return web.Response(status=405, text="405: Method Not Allowed", headers={"Allow": allow})


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON)
