"""A model backend served to other processes whole: ``BackendServer`` on one side, ``HttpBackend`` on the other.

Remote runners (``tether.RayRunners``) each run their own proxy, which records every call of their attempts
into the shared store; their model is the trainer's backend. The OpenAI endpoint cannot carry it exactly (it
drops the prompt's and the response's token ids, the policy that answers and the weights version), so the
backend itself travels: ``POST /chat`` takes a ``ChatRequest`` as JSON and answers the backend's
``ChatResult`` as JSON, field for field. A proxy in front of an ``HttpBackend`` therefore records exactly
the spans a proxy in front of the backend itself records. ``BadRequest`` comes back as 400 and
``BackendError`` (or any other failure) as 502, raised again on the client with the backend's message.

The server follows the store's bind rule (``tether._net.check_bind``): beyond loopback it needs a ``token``,
and then every request must carry ``Authorization: Bearer <token>`` (401 otherwise); ``HttpBackend`` sends
its ``token`` (or ``TETHER_BACKEND_TOKEN``). ``RayRunners`` sessions make one and hand it to the actors in
their Ray runtime env. Requests a web page could send (foreign ``Host`` on loopback, foreign ``Origin``, a
body that is not JSON) are refused as on the store server.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import os
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tether._net import check_bind, request_refusal, unbracket
from tether.models.base import (
    DEFAULT_BACKEND_TIMEOUT_S,
    BackendError,
    BadRequest,
    ChatRequest,
    ChatResult,
    Choice,
    ModelBackend,
)

log = logging.getLogger(__name__)

_MAX_BODY = 256 * 1024 * 1024


def request_to_json(request: ChatRequest) -> bytes:
    return orjson.dumps(dataclasses.asdict(request))


def request_from_json(raw: bytes) -> ChatRequest:
    data = orjson.loads(raw)
    if not isinstance(data, dict):
        raise BadRequest("the body is not a JSON object")
    known = {f.name for f in dataclasses.fields(ChatRequest)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadRequest(f"unknown ChatRequest fields {unknown}")
    return ChatRequest(**data)


def result_to_json(result: ChatResult) -> bytes:
    if not isinstance(result, ChatResult):
        raise BackendError(f"backend returned {type(result).__name__}, not a ChatResult")
    return orjson.dumps(dataclasses.asdict(result))


def result_from_json(raw: bytes) -> ChatResult:
    data = orjson.loads(raw)
    data["choices"] = [Choice(**c) for c in data["choices"]]
    return ChatResult(**data)


#: the environment variable an ``HttpBackend`` reads its token from (set in Ray actors by the session)
TOKEN_ENV = "TETHER_BACKEND_TOKEN"


class BackendServer:
    """Serve ``backend`` on ``host:port`` (0: a free port) at ``POST /chat``; ``url`` is where it answers.
    It never starts or closes the backend (its owner does)."""

    def __init__(
        self, backend: ModelBackend, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None
    ) -> None:
        check_bind(unbracket(host), token, "the model server")
        self.backend = backend
        self.host = host
        self.port = port
        self._expected = f"Bearer {token}".encode() if token else None
        self._runner: web.BaseRunner | None = None

    async def start(self) -> BackendServer:
        if self._runner is None:
            runner = web.ServerRunner(web.Server(self._handle), access_log=None, handle_signals=False)
            await runner.setup()
            await web.TCPSite(runner, self.host, self.port).start()
            self._runner = runner
            self.port = int(runner.addresses[0][1])
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> BackendServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        refused = request_refusal(request, token=self._expected is not None)
        if refused is not None:
            return _error(*refused)
        if self._expected is not None:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, self._expected):
                what = "wrong bearer token" if given else "missing bearer token"
                return _error(401, f"{what}: send 'Authorization: Bearer <token>' (HttpBackend(token=...))")
        if request.path == "/health":
            return web.Response(text="ok")
        if request.path != "/chat" or request.method != "POST":
            return _error(404, f"{request.method} {request.path}: the backend server serves POST /chat")
        try:
            chat = request_from_json(await request.read())
            payload = result_to_json(await self.backend.chat(chat))
        except (BadRequest, orjson.JSONDecodeError, TypeError) as exc:
            return _error(400, str(exc))
        except BackendError as exc:
            return _error(502, str(exc))
        except Exception as exc:
            log.exception("model backend %s raised", type(self.backend).__name__)
            return _error(502, f"{type(exc).__name__}: {exc}")
        return web.Response(body=payload, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return web.Response(body=orjson.dumps({"error": message}), status=status, content_type="application/json")


class HttpBackend(ModelBackend):
    """The backend a ``BackendServer`` at ``url`` serves, as a ``ModelBackend`` of this process."""

    name = "http"

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_BACKEND_TIMEOUT_S, token: str | None = None
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(limit=256), headers=self._headers
            )

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def chat(self, request: ChatRequest) -> ChatResult:
        await self.start()
        assert self._session is not None
        try:
            async with self._session.post(f"{self.url}/chat", data=request_to_json(request)) as resp:
                raw, status = await resp.read(), resp.status
        except TimeoutError:
            raise BackendError(f"{self.url} did not answer within {self.timeout_s:g} s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise BackendError(f"cannot reach the trainer's model backend at {self.url}: {exc}") from None
        if status != 200:
            message = _message(raw)
            raise (BadRequest if status == 400 else BackendError)(message)
        try:
            return result_from_json(raw)
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise BackendError(f"{self.url} sent a malformed result ({exc}): {raw[:200]!r}") from None


def _message(raw: bytes) -> str:
    try:
        data: Any = orjson.loads(raw)
        return str(data["error"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return raw[:500].decode("utf-8", "replace")
