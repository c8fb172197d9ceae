"""The proxy server: an OpenAI-compatible endpoint per rollout attempt, in front of one model backend.

An attempt is served while it is open: ``async with proxy.attempt(rollout_id, attempt_id, sampling) as url``
registers it (with the sampling that overrides the agent's own) and yields its OpenAI base URL,
``{proxy.url}/r/{rollout_id}/{attempt_id}/v1``. ``POST {url}/chat/completions`` validates the request, asks
the backend, answers (as JSON or as an SSE stream synthesised from the whole completion) and submits one
``llm`` span for that attempt to the ``SpanBatcher`` it was given; no store round trip is made per call.
``POST {url}/responses`` (the Responses API) is the chat call it translates to (``tether.proxy.responses_api``).
Without the prefix both serve the same backend unrecorded (calls made outside any rollout). Errors use OpenAI's
body shape: 400 for bad requests, 404 for an attempt that is not open or a URL the proxy does not serve, 405
for a wrong method, 502 when the backend fails. A call of an open attempt that the backend rejected or failed
is recorded as an ``llm`` span named ``spans.LLM_CALL_FAILED`` (the request and the error; never a
transition), so a rollout without transitions says why.

The HTTP side is tether's own small HTTP/1.1 server (``tether.proxy._http_server``: keep-alive, pipelining,
``Content-Length`` and chunked bodies, ``Expect: 100-continue``). A call whose client goes away before its
answer is cancelled, upstream request included (the backend's connection is closed), and leaves no span: it
was never answered. At most ``max_concurrent_calls`` calls are in flight to the backend; a call that finds none
free within ``queue_timeout_s`` gets 503 (OpenAI clients retry it) instead of waiting behind a backend that
hangs.

A call whose span would be over ``max_span_bytes`` (24 MiB: an HTTP store takes 32 MiB a request) is not
answered (413), since its transition could not be stored; a failed-call span records why.

A web page cannot use the proxy (``tether._net.refusal``): on loopback a ``Host`` that is not this machine's
is refused (DNS rebinding), as is a call with a foreign ``Origin`` or a body that is not JSON.

The proxy follows every tether server's bind rule (``tether._net.check_bind``): beyond loopback it needs a
``token`` (anyone who reached it could make calls to the model with the trainer's key), and with one every request
but ``GET /health`` must carry it, as ``X-Tether-Token: <token>`` (what the endpoint redirect adds from the
rollout's ``RolloutScope.token``; the runner passes the proxy's) or ``Authorization: Bearer <token>``; 401
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import orjson

from tether._net import check_bind, refusal, unbracket
from tether._slots import Slots
from tether.capture.context import AGENT_HEADER, CALL_ID_HEADER, TOKEN_HEADER, decode_agent_header
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import BackendError, BadRequest, ChatRequest, ChatResult, ModelBackend
from tether.policies import PolicyMap
from tether.proxy import responses_api
from tether.proxy._attempts import OpenAttempt
from tether.proxy._error_answers import ErrorAnswers
from tether.proxy._http_server import HttpServer, Request, Response
from tether.proxy._responses import JSON, MAX_BODY, models_list
from tether.proxy.capture import (
    RecordedCall,
    call_span,
    completion_json,
    failed_call_span,
    request_params,
    span_size,
)
from tether.proxy.request import InvalidRequest
from tether.proxy.sse import sse_body
from tether.proxy.system_messages import Replacement, Rule
from tether.types import new_id

log = logging.getLogger(__name__)

#: the largest span the proxy records (an estimate: request and answer bytes, token ids): under the HTTP
#: store's default 32 MiB request cap, with room for JSON's overhead
DEFAULT_MAX_SPAN_BYTES = 24 * 1024 * 1024
_TRUNCATED = orjson.dumps({"messages": [{"role": "user", "content": "[not recorded: the request was too large]"}]})
#: ``refusal`` depends on its arguments only, and a proxy's clients send the same few hosts and types
_refusal = functools.lru_cache(maxsize=256)(refusal)
_CALL_ID = CALL_ID_HEADER.lower()
_AGENT = AGENT_HEADER.lower()
_TOKEN = TOKEN_HEADER.lower()
_SSE_HEADERS = {"Cache-Control": "no-cache"}
_CALLS = ("/v1/chat/completions", "/v1/responses")


@dataclass(eq=False)
class ProxyServer(ErrorAnswers):
    """Serve ``backend`` on ``host:port`` (0: a free port); each call of an open attempt becomes a span
    submitted to ``batcher``.

    The batcher is the caller's (one batcher for the proxy's spans and the adapters' keeps an attempt's spans
    in order): ``stop`` flushes it but never closes it. ``start`` also starts the backend (backends'
    ``start`` is idempotent); ``stop`` closes the backend only if ``close_backend`` is true (the caller
    usually owns it).

    ``policies`` (the wrapped agent's ``PolicyMap``) routes each call to the policy that serves its sub-agent
    (the ``AGENT_HEADER``): ``ChatRequest.policy`` is set to it unless the map is shared (one model serves
    every sub-agent: the backend's default policy answers), and the call's span records it under
    ``spans.POLICY`` (``"policy"`` when shared). None: every call goes to the default policy and spans record none.

    ``token``: required beyond loopback (``ValueError`` otherwise); with one, each request must carry it
    (``X-Tether-Token`` or ``Authorization: Bearer``) or gets 401.
    """

    backend: ModelBackend
    _: KW_ONLY
    batcher: SpanBatcher
    host: str = "127.0.0.1"
    port: int = 0
    close_backend: bool = False
    policies: PolicyMap | None = None
    max_concurrent_calls: int = 512
    queue_timeout_s: float = 10.0
    max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES
    token: str | None = None
    calls: int = field(default=0, init=False)  # successful recorded calls
    failures: int = field(default=0, init=False)  # calls answered with an error
    _server: HttpServer | None = field(default=None, init=False)
    #: the open attempts by (rollout id, attempt id): what each changes in its calls
    _attempts: dict[tuple[str, str], OpenAttempt] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        check_bind(unbracket(self.host), self.token, "the proxy", "Pass ProxyServer(token=<secret>)")
        if self.max_concurrent_calls < 1:
            raise ValueError(f"max_concurrent_calls must be >= 1, got {self.max_concurrent_calls}")
        self.token = self.token or None
        self._bearer = f"Bearer {self.token}".encode() if self.token else b""
        self._upstream = Slots(self.max_concurrent_calls)

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> ProxyServer:
        if self._server is not None:
            return self
        await self.backend.start()
        await self.batcher.start()
        # one handler that routes five fixed paths by hand; a client that hangs up cancels its call, and so the
        # backend request it waits on
        server = HttpServer(self._route, self._unreadable, self.host, self.port, max_body=MAX_BODY)
        await server.start()
        self._server = server
        self.port = server.port
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started: `await proxy.start()` or `async with proxy:`")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @contextlib.asynccontextmanager
    async def attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        sampling: Mapping[str, Any] | None = None,
        system_messages: Rule | None = None,
    ) -> AsyncIterator[str]:
        """Serve this rollout attempt while the block runs; yields its OpenAI base URL (ending in ``/v1``).

        ``sampling`` (``temperature``, ``top_p``, ``max_tokens``, ``seed``; None values ignored) overrides
        what the agent asks for in each call. A call still in flight when the block exits (one the agent
        abandoned, at a timeout say) is answered and its span submitted; a request arriving after the block
        is answered 404, so a stray caller never adds spans to an attempt that has ended.
        ``system_messages`` (sub-agent -> ``Replacement``, see ``tether.proxy.system_messages``) replaces the exact
        captured system message of that sub-agent's calls with a candidate before the model sees them.
        """
        for what, value in (("rollout_id", rollout_id), ("attempt_id", attempt_id)):
            if not value or "/" in value:
                raise ValueError(f"{what} must be a non-empty string without '/', got {value!r}")
        key = (rollout_id, attempt_id)
        if key in self._attempts:
            raise ValueError(f"attempt {attempt_id!r} of rollout {rollout_id!r} is already open on this proxy")
        url = f"{self.url}/r/{rollout_id}/{attempt_id}/v1"
        self._attempts[key] = OpenAttempt.of(sampling, system_messages)
        try:
            yield url
        finally:
            self._attempts.pop(key, None)

    async def flush(self) -> None:
        """Return when every call answered so far is in the store."""
        await self.batcher.flush()

    async def stop(self) -> None:
        """Stop serving, write the pending spans (the batcher stays open: its owner closes it), and close the
        backend if asked to. Idempotent."""
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()
        await self.batcher.flush()
        if self.close_backend:
            await self.backend.close()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers -----------------------------------------------------------------------------------------

    async def _route(self, request: Request) -> Response:
        """``POST [/r/{rid}/{aid}]/v1/chat/completions``, ``GET [/r/{rid}/{aid}]/v1/models``, ``GET /health``."""
        headers = request.headers
        refused = _refusal(
            request.method,
            headers.get("host"),
            headers.get("origin"),
            request.content_type,
            request.local_address,
            token=self.token is not None,
        )
        if refused is not None:  # a web page driving the proxy (and the trainer's key behind it)
            return self._error(refused[0], refused[1], code="refused")
        path = request.path
        if self.token is not None and path != "/health" and not self._authorized(headers):
            return self._error(
                401,
                "missing or wrong proxy token: send 'X-Tether-Token: <token>' (the runner's endpoint redirect "
                "does) or 'Authorization: Bearer <token>'",
                kind="authentication_error",
                code="unauthorized",
            )
        key: tuple[str, str] | None = None
        attempt: OpenAttempt | None = None
        if path.startswith("/r/"):
            parts = path.split("/", 4)  # "", "r", rid, aid, rest
            if len(parts) < 5 or not parts[2] or not parts[3]:
                return self._unknown(request, "the URL names no rollout or attempt")
            key, path = (parts[2], parts[3]), "/" + parts[4]
            attempt = self._attempts.get(key)
            if attempt is None:
                return self._error(
                    404,
                    f"attempt {key[1]!r} of rollout {key[0]!r} is not open on this proxy: its calls are served "
                    "only inside `async with proxy.attempt(rollout_id, attempt_id) as base_url:`",
                    code="unknown_attempt",
                )
        method = request.method
        if path in _CALLS:
            if method != "POST":
                return self._not_allowed(request, "POST")
            return await self._chat(request, key, attempt, responses=path == "/v1/responses")
        if path == "/v1/models" or (path == "/health" and key is None):
            if method not in ("GET", "HEAD"):
                return self._not_allowed(request, "GET,HEAD")
            if path == "/health":
                return Response(b"ok", content_type="text/plain; charset=utf-8")
            return models_list(self.backend)
        return self._unknown(request, "no such endpoint")

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        assert self.token is not None
        given = headers.get(_TOKEN)
        if given is not None:
            return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token.encode())
        bearer = headers.get("authorization", "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(bearer, self._bearer)

    async def _chat(
        self, request: Request, key: tuple[str, str] | None, attempt: OpenAttempt | None, responses: bool
    ) -> Response:
        """Answer one call; ``key`` (rollout id, attempt id) and its open ``attempt`` when the call is recorded.
        A Responses API call (``responses``) is answered and recorded as the chat call it translates to."""
        start_time = time.time()
        started = time.perf_counter()
        try:
            asked, raw, chat, stream = responses_api.read_call(request.body, responses)
        except InvalidRequest as exc:
            return self._error(400, str(exc), param=exc.param)
        call_id = request.headers.get(_CALL_ID) or new_id("call")
        agent_name = decode_agent_header(request.headers.get(_AGENT))
        replaced = attempt.prepare(chat, agent_name) if attempt is not None else None
        policy: str | None = None
        if self.policies is not None:
            policy = self.policies.policy_of(agent_name)
            if not self.policies.shared:
                chat.policy = policy
        call = RecordedCall(key[0], key[1], agent_name, call_id, raw, start_time) if key is not None else None
        answered = await self._ask(chat, call_id)
        if isinstance(answered, Response):  # no call free: never reached the backend, not recorded
            return answered
        if isinstance(answered, _Failure):
            if call is not None:  # on record, so a rollout without transitions says why
                self.batcher.submit(failed_call_span(call, answered.message, answered.status))
            return self._error(answered.status, answered.message, kind=answered.kind)
        result, completion, payload = answered
        if call is not None:
            latency_ms = (time.perf_counter() - started) * 1000.0
            refused = self._record(call, policy, replaced, chat, stream, result, payload, latency_ms)
            if refused is not None:
                return refused
        if responses:
            return responses_api.answer(asked, completion, call_id, stream)
        if stream:
            return Response(sse_body(completion), content_type="text/event-stream", headers=_SSE_HEADERS)
        return Response(payload, content_type=JSON)

    async def _ask(
        self, chat: ChatRequest, call_id: str
    ) -> tuple[ChatResult, dict[str, Any], bytes] | _Failure | Response:
        """The backend's answer (the result, its completion object and that object's JSON), or why it failed;
        the 503 answer when no call was free within ``queue_timeout_s``."""
        if not self._upstream.try_take():  # all taken: wait for one, for at most queue_timeout_s
            try:
                async with asyncio.timeout(self.queue_timeout_s):
                    await self._upstream.take()
            except TimeoutError:
                return self._overloaded()
        try:
            result = await self.backend.chat(chat)
            completion = completion_json(result, f"chatcmpl-{call_id}", bool(chat.extra.get("logprobs")))
            return result, completion, orjson.dumps(completion)
        except BadRequest as exc:
            return _Failure(400, f"the model backend rejected the request: {exc}", "invalid_request_error")
        except BackendError as exc:
            return _Failure(502, f"the model backend failed: {exc}", "upstream_error")
        except Exception as exc:
            log.exception("model backend %s raised", type(self.backend).__name__)
            return _Failure(502, f"the model backend raised {type(exc).__name__}: {exc}", "upstream_error")
        finally:
            self._upstream.give()

    def _record(
        self,
        call: RecordedCall,
        policy: str | None,
        replaced: tuple[Replacement, list[int]] | None,
        chat: ChatRequest,
        stream: bool,
        result: ChatResult,
        payload: bytes,
        latency_ms: float,
    ) -> Response | None:
        """Submit the span of an answered call; or, when it would be over ``max_span_bytes``, a failed-call
        span and the 413 the agent gets instead of the answer."""
        size = span_size(call.raw_request, payload, result)
        if size > self.max_span_bytes:
            # its span would be refused by the store (an HTTP store takes 32 MiB a request): the agent would
            # get an answer whose transition silently vanishes. Refuse the call instead, on record.
            message = (
                f"the call's record would be about {size / 2**20:.1f} MiB, over this "
                f"proxy's max_span_bytes ({self.max_span_bytes / 2**20:.0f} MiB): it is not answered, since its "
                "transition could not be stored. Send less context per call, or raise max_span_bytes if the store "
                "takes bigger requests (tether store serve --max-body-mb)"
            )
            self.batcher.submit(failed_call_span(call, message, 413, raw_request=_TRUNCATED))
            return self._error(413, message, code="record_too_large")
        # built when its batch is written: off the path of this answer and the next ones
        self.batcher.submit_deferred(
            functools.partial(
                call_span,
                call,
                policy,
                replaced,
                params=request_params(chat, stream),  # not ``chat``: its messages need not stay alive
                result=result,
                response_payload=payload,
                latency_ms=latency_ms,
            )
        )
        self.calls += 1
        return None


@dataclass(frozen=True, slots=True)
class _Failure:
    """A call the backend did not answer: the status, message and error type of the agent's answer."""

    status: int
    message: str
    kind: str
