"""``RemoteBackend``: any OpenAI-compatible chat-completions server, passed through.

The request goes upstream non-streaming (the proxy synthesises streams). Token ids are recorded when the
server returns them the way vLLM does when asked with ``return_token_ids``: ``prompt_token_ids`` on the
response and ``token_ids`` on each choice; logprobs when it returns ``logprobs.content``. Otherwise they
stay ``None`` and the result says token ids are not available. Chat calls to a plain ``http://`` server go
over ``tether._http11`` (a lean keep-alive client: the proxy's per-call CPU); ``https://`` ones over aiohttp.
"""

from __future__ import annotations

from array import array
from typing import Any

import aiohttp
import orjson

from tether._deadlines import Deadlines
from tether._http11 import Http11Pool
from tether.models.base import (
    DEFAULT_BACKEND_TIMEOUT_S,
    BackendError,
    BadRequest,
    ChatRequest,
    ChatResult,
    Choice,
    ModelBackend,
)

_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


class RemoteBackend(ModelBackend):
    """Forward chat requests to ``base_url`` (ending in ``/v1``).

    ``model`` overrides the model named by the agent's request (agents often hard-code one); without it the
    request's model is used, else the server's first listed model. ``return_token_ids`` / ``logprobs`` ask
    the server for token ids and logprobs (vLLM understands both; other servers may reject the former).
    """

    name = "remote"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        return_token_ids: bool = False,
        logprobs: bool = False,
        timeout_s: float = DEFAULT_BACKEND_TIMEOUT_S,
        max_connections: int = 256,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.return_token_ids = return_token_ids
        self.logprobs = logprobs
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._chat_url = f"{self.base_url}/chat/completions"
        self._default_model: str | None = None
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 (seconds a call may take), got {timeout_s!r}")
        self._deadlines = Deadlines(timeout_s)
        self._lean = (
            Http11Pool(self.base_url, self._headers, limit=max_connections)
            if self.base_url.startswith("http://")
            else None
        )

    async def start(self) -> None:
        self._ensure_session()

    async def close(self) -> None:
        if self._lean is not None:
            self._lean.close()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _ensure_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=60)
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self._headers, json_serialize=_dumps
            )
            self._session = session
        return session

    def payload(self, request: ChatRequest, model: str | None) -> dict[str, Any]:
        """The upstream request body for ``request``."""
        body: dict[str, Any] = dict(request.extra)
        body.pop("stream", None)
        body.pop("stream_options", None)
        body["messages"] = request.messages
        if model:
            body["model"] = model
        if request.tools:
            body["tools"] = request.tools
        if request.n != 1:
            body["n"] = request.n
        body["temperature"] = request.temperature
        body["top_p"] = request.top_p
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.stop:
            body["stop"] = request.stop
        if request.seed is not None:
            body["seed"] = request.seed
        if self.return_token_ids:
            body["return_token_ids"] = True
        if self.logprobs:
            body["logprobs"] = True
        return body

    async def _model_for(self, request: ChatRequest) -> str | None:
        if self.model:
            return self.model
        if request.model:
            return request.model
        if self._default_model is None:
            self._default_model = await self._first_model() or ""
        return self._default_model or None

    async def _first_model(self) -> str | None:
        try:
            async with self._ensure_session().get(f"{self.base_url}/models") as resp:
                if resp.status != 200:
                    return None
                data = orjson.loads(await resp.read())
            return str(data["data"][0]["id"])
        except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return None

    async def chat(self, request: ChatRequest) -> ChatResult:
        model = self.model or request.model  # else the server's first model, asked once
        body = self.payload(request, model or await self._model_for(request))
        try:
            if self._lean is not None:  # plain http (a local server): the proxy's hot path, kept lean
                exchange = self._lean.request("POST", "/chat/completions", orjson.dumps(body))
                status, raw = await self._deadlines.within(exchange)  # one timer for all calls, not one each
            else:
                async with self._ensure_session().post(self._chat_url, data=orjson.dumps(body)) as resp:
                    raw = await resp.read()
                    status = resp.status
        except TimeoutError:
            raise BackendError(f"{self._chat_url} did not answer within {self.timeout_s:g} s") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise BackendError(f"cannot reach {self._chat_url}: {exc}") from None
        if status != 200:
            message = _error_message(raw)
            if status in (400, 422):
                raise BadRequest(f"{self.base_url} answered {status}: {message}")
            raise BackendError(f"{self.base_url} answered {status}: {message}")
        try:
            data = orjson.loads(raw)
            return parse_completion(data, body.get("model"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise BackendError(
                f"{self.base_url} sent a malformed chat completion ({exc}): {raw[:200]!r}"
            ) from None


def parse_completion(data: dict[str, Any], model: str | None = None) -> ChatResult:
    """A ``ChatResult`` from an OpenAI chat-completion body (with vLLM's token-id fields when present)."""
    choices = []
    listed = data["choices"]
    for raw_choice in listed if len(listed) == 1 else sorted(listed, key=_index):
        message = {k: v for k, v in raw_choice["message"].items() if v is not None or k == "content"}
        message["role"] = "assistant"
        message.setdefault("content", None)
        if not message.get("tool_calls"):
            message.pop("tool_calls", None)
        ids = raw_choice.get("token_ids")
        finish = raw_choice.get("finish_reason") or "stop"
        choices.append(
            Choice(
                message=message,
                finish_reason=finish if finish in _FINISH else "stop",
                response_token_ids=_token_ids(ids) if ids is not None else None,
                logprobs=_logprobs(raw_choice.get("logprobs")),
            )
        )
    prompt_ids = data.get("prompt_token_ids")
    usage = {k: v for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
    return ChatResult(
        choices=choices,
        model=str(data.get("model") or model or "unknown"),
        prompt_token_ids=_token_ids(prompt_ids) if prompt_ids is not None else None,
        usage=usage,
    )


def _token_ids(ids: Any) -> list[int]:
    """Token ids as a list of ints: the decoded list itself when it holds only ints (checked in C by ``array``,
    ~15 ns an id), else each coerced by ``int``. Coercing every id (~40 ns each) was the largest piece of the
    proxy's own work per call, and it grows with the prompt. An id beyond 64 bits is a ``ValueError`` (the call
    fails, 502): a store holds ids as 64-bit integers, so its transition could not be recorded."""
    if type(ids) is list:
        try:
            array("q", ids)
        except TypeError:
            pass
        except OverflowError:
            raise ValueError(_TOO_BIG) from None
        else:
            return ids
    coerced = list(map(int, ids))
    try:
        array("q", coerced)
    except OverflowError:
        raise ValueError(_TOO_BIG) from None
    return coerced


_TOO_BIG = "a token id does not fit in 64 bits, so the call's transition could not be stored"


def _index(choice: dict[str, Any]) -> Any:
    return choice.get("index", 0)


def _logprobs(logprobs: Any) -> list[float] | None:
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        return None
    return [float(entry["logprob"]) for entry in logprobs["content"]]


def _error_message(raw: bytes) -> str:
    try:
        data = orjson.loads(raw)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(data, dict) and data.get("message"):  # some servers (vLLM's older errors) put it here
            return str(data["message"])
    except orjson.JSONDecodeError:
        pass
    return raw[:500].decode(errors="replace") or "(empty body)"


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
