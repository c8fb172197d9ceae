"""A scripted, deterministic OpenAI-compatible chat-completions server for tests.

``FakeLLM`` listens on a free loopback port and answers ``POST /v1/chat/completions`` from a script: a list of
replies consumed in order, then (or instead) a function of the request JSON. It records every request it
received (with headers), honours ``n`` and ``stream`` (OpenAI's SSE chunks, always ending with a usage chunk
and ``data: [DONE]``), and with ``return_token_ids`` (vLLM's request flag) returns token ids. Its "tokens" are
UTF-8 bytes, so ``bytes(token_ids).decode()`` gives back the text; ``logprobs`` are a fixed -0.5 per token.

    async with FakeLLM([text("hi"), tool_call("add", {"a": 1})]) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="x")

    with FakeLLM(handler=lambda req: text("ok")) as llm:   # from sync code: served from a thread
        ...
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from tether.proxy.sse import DONE, stream_chunks

__all__ = ["FakeLLM", "RecordedRequest", "Reply", "ToolCall", "error", "text", "tool_call", "tool_calls"]

FAKE_LOGPROB = -0.5


@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str | None = None


@dataclass(slots=True)
class Reply:
    """One scripted answer: text, tool calls (optionally with text), or an HTTP error."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"
    status: int = 200
    error_message: str | None = None
    error_type: str | None = None
    delay_s: float = 0.0  # wait this long before answering (for concurrency tests)
    #: the response token ids sent when asked for them (None: the reply's UTF-8 bytes), for a backend that
    #: sends ids a store cannot hold
    token_ids: list[Any] | None = None


def text(content: str, *, finish_reason: str = "stop", delay_s: float = 0.0) -> Reply:
    """A plain assistant message."""
    return Reply(content=content, finish_reason=finish_reason, delay_s=delay_s)


def tool_call(
    name: str, arguments: dict[str, Any] | str | None = None, *, content: str | None = None, id: str | None = None
) -> Reply:
    """An assistant message that calls one tool (``arguments`` is a dict, or a raw JSON string)."""
    return Reply(content=content, tool_calls=[ToolCall(name, {} if arguments is None else arguments, id)])


def tool_calls(*calls: Reply | ToolCall | tuple[str, dict[str, Any]], content: str | None = None) -> Reply:
    """An assistant message that calls several tools at once: ``tool_calls(("a", {...}), ("b", {...}))``."""
    out: list[ToolCall] = []
    for call in calls:
        if isinstance(call, Reply):
            out.extend(call.tool_calls)
        elif isinstance(call, ToolCall):
            out.append(call)
        else:
            name, arguments = call
            out.append(ToolCall(name, arguments))
    return Reply(content=content, tool_calls=out)


def error(status: int, message: str, *, type: str | None = None) -> Reply:
    """An HTTP error with an OpenAI-style body."""
    return Reply(status=status, error_message=message, error_type=type)


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: CIMultiDict[str]  # case-insensitive: ``req.headers["x-tether-agent"]``
    json: Any


ScriptItem = Reply | str | Sequence[Reply | str]  # a sequence gives one reply per choice (for ``n`` > 1)
Handler = Callable[[dict[str, Any]], "ScriptItem | Awaitable[ScriptItem]"]


class FakeLLM:
    """The fake server. ``replies`` are used first, in order; then ``handler(request_json)``; then
    ``default``. With none left it answers 500 saying the script ran out."""

    def __init__(
        self,
        replies: Iterable[ScriptItem] = (),
        *,
        handler: Handler | None = None,
        default: ScriptItem | None = None,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._replies: deque[ScriptItem] = deque(replies)
        self.handler = handler
        self.default = default
        self.model = model
        self._host = host
        self._port = port
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._bound_port: int | None = None
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- scripting ----------------------------------------------------------------------------------------

    def add(self, *replies: ScriptItem) -> None:
        """Append replies to the script."""
        self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        """Scripted replies not yet used."""
        return len(self._replies)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat-completion requests received, in order."""
        return [r.json for r in self.requests if r.path.endswith("/chat/completions")]

    # -- lifecycle ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("FakeLLM is not started: use `async with FakeLLM(...)` or `with FakeLLM(...)`")
        return self._bound_port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"{self.url}/v1"

    async def start(self) -> FakeLLM:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self._bound_port = int(self._runner.addresses[0][1])
        return self

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLM:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start_in_thread(self) -> FakeLLM:
        """Serve from a background thread with its own event loop (for sync code). ``stop()`` ends it."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def _serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.aclose())
            loop.close()

        self._thread = threading.Thread(target=_serve, name="tether-fake-llm", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop a server started with ``start_in_thread``."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FakeLLM:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handlers -----------------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        body = {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}],
        }
        return _json_response(body)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._record(request, raw.decode(errors="replace"))
            return _error_response(400, "request body is not valid JSON")
        self._record(request, body)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error_response(400, "'messages' must be a list of messages", param="messages")
        n = body.get("n") or 1
        item = await self._next_item(body)
        if item is None:
            used = len(self.chat_requests) - 1
            return _error_response(
                500, f"FakeLLM script exhausted after {used} replies (add replies or a handler)"
            )
        if isinstance(item, Reply | str):
            replies = [_as_reply(item)] * n
        else:
            replies = [_as_reply(r) for r in item]
        if len(replies) < n:
            replies += [replies[-1]] * (n - len(replies))
        failed = next((r for r in replies if r.status != 200), None)
        delay = max(r.delay_s for r in replies)
        if delay:
            await asyncio.sleep(delay)
        if failed is not None:
            return _error_response(failed.status, failed.error_message or "error", type=failed.error_type)
        completion = self._completion(body, replies[:n])
        if body.get("stream"):
            return await self._stream(request, completion)
        return _json_response(completion)

    def _record(self, request: web.Request, body: Any) -> None:
        self.requests.append(RecordedRequest(request.method, request.path, CIMultiDict(request.headers), body))

    async def _next_item(self, body: dict[str, Any]) -> ScriptItem | None:
        if self._replies:
            return self._replies.popleft()
        if self.handler is not None:
            result = self.handler(body)
            if inspect.isawaitable(result):
                result = await result
            return result
        return self.default

    def _completion(self, body: dict[str, Any], replies: list[Reply]) -> dict[str, Any]:
        want_ids = bool(body.get("return_token_ids"))
        want_logprobs = bool(body.get("logprobs"))
        prompt_ids = list(orjson.dumps(body["messages"]))
        choices = []
        completion_tokens = 0
        for index, reply in enumerate(replies):
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                message["tool_calls"] = [self._tool_call_json(c) for c in reply.tool_calls]
            generated = _generated_text(message)
            ids = list(generated.encode()) if reply.token_ids is None else list(reply.token_ids)
            completion_tokens += len(ids)
            finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "finish_reason": finish,
                "logprobs": None,
            }
            if want_logprobs:
                choice["logprobs"] = {"content": [_logprob_entry(i) for i in ids]}
            if want_ids:
                choice["token_ids"] = ids
            choices.append(choice)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
            },
        }
        if want_ids:
            completion["prompt_token_ids"] = prompt_ids
        return completion

    def _tool_call_json(self, call: ToolCall) -> dict[str, Any]:
        arguments = call.arguments if isinstance(call.arguments, str) else orjson.dumps(call.arguments).decode()
        return {
            "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": call.name, "arguments": arguments},
        }

    async def _stream(self, request: web.Request, completion: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in stream_chunks(completion, piece=8):
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(DONE)
        await response.write_eof()
        return response


def _as_reply(item: Reply | str) -> Reply:
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return text(item)
    raise TypeError(f"FakeLLM script items are Reply objects (text(), tool_call(), error()) or str, got {item!r}")


def _generated_text(message: dict[str, Any]) -> str:
    """What the fake model 'generated' for a message: its content, then each tool call as JSON."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        parts.append(orjson.dumps(call["function"]).decode())
    return "".join(parts)


def _logprob_entry(token_id: int) -> dict[str, Any]:
    return {"token": f"token_id:{token_id}", "logprob": FAKE_LOGPROB, "bytes": [token_id], "top_logprobs": []}


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error_response(
    status: int, message: str, *, type: str | None = None, param: str | None = None
) -> web.Response:
    kind = type or ("invalid_request_error" if status < 500 else "server_error")
    return _json_response({"error": {"message": message, "type": kind, "param": param, "code": None}}, status)
