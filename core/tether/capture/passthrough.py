"""Model calls that keep their own endpoint inside a rollout: a judge, a scorer, any client that is not the
policy being trained.

Inside a rollout, tether's endpoint redirect (``tether.capture.redirect``) sends every ``openai`` SDK request to
the rollout's proxy, so the model being trained answers it and the call becomes a transition. Two ways exempt a
call:

- ``with tether.passthrough():`` — every request made in the block (and in tasks and ``asyncio.to_thread``
  workers started from it, which copy the context) keeps its client's own URL;
- ``tether.wrap(agent, passthrough=[judge_client])`` — every request of those clients does, wherever it is
  made. A client is an ``openai`` SDK client, or an object holding one (AutoGen's
  ``OpenAIChatCompletionClient``, LangChain's ``ChatOpenAI``, an SDK resource such as
  ``client.chat.completions``). ``client.with_options(...)`` makes a new client: pass that one.

A wrapped agent's ``reward=`` function always runs as ``passthrough()``: a judge there is the scorer's.

Such a request is left untouched (no redirect, no tether header) and recorded on the rollout for inspection:
an ``llm`` span named ``spans.PASSTHROUGH_CALL`` with ``spans.PASSTHROUGH`` true, the URL it went to, the
request body, the response body when it was answered unstreamed, and the running agent's name. It is never
a transition and never trained. A request that fails (an HTTP error, no connection) is not recorded; its
error reaches the caller as usual.

The redirect calls ``exempt`` for each request it would redirect and ``note_request`` for the exempt ones;
the recording is completed in ``response_wrapper``, which the redirect installs on the SDK's
``_process_response`` of its sync and async clients while it is held.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from tether import spans
from tether._json import jsonable
from tether.capture.context import current_agent_name, current_sink
from tether.types import SpanKind

log = logging.getLogger(__name__)

_region: ContextVar[bool] = ContextVar("tether_passthrough", default=False)
_clients: ContextVar[frozenset[int]] = ContextVar("tether_passthrough_clients", default=frozenset())


@contextlib.contextmanager
def passthrough() -> Iterator[None]:
    """Inside a rollout, keep every model request made in this block on its client's own endpoint; each one is
    recorded for inspection, never trained (see the module docstring). Outside a rollout it changes nothing."""
    token = _region.set(True)
    try:
        yield
    finally:
        _region.reset(token)


@contextlib.contextmanager
def clients_held(ids: frozenset[int]) -> Iterator[None]:
    """Exempt the clients with these ids (from ``client_ids``) for the block; a wrapped agent holds its own
    ``passthrough=`` clients around each run and score."""
    if not ids:
        yield
        return
    token = _clients.set(_clients.get() | ids)
    try:
        yield
    finally:
        _clients.reset(token)


def client_ids(objects: Iterable[Any]) -> frozenset[int]:
    """The ids of the ``openai`` SDK clients in ``objects`` (clients, or objects holding one); ``TypeError``
    naming what is accepted for anything else. The caller keeps the objects alive (ids are reused after)."""
    found: set[int] = set()
    for obj in objects:
        clients = _openai_clients_of(obj)
        if not clients:
            raise TypeError(
                f"passthrough= takes openai SDK clients, or model clients that hold one (AutoGen's "
                f"OpenAIChatCompletionClient, LangChain's ChatOpenAI); {type(obj).__qualname__} holds none"
            )
        found.update(id(c) for c in clients)
    return frozenset(found)


def _openai_clients_of(obj: Any) -> list[Any]:
    base = getattr(sys.modules.get("openai._base_client"), "BaseClient", None)
    if not isinstance(base, type):  # openai not imported: obj cannot hold one of its clients
        return []
    if isinstance(obj, base):
        return [obj]
    inner = getattr(obj, "_client", None)  # an SDK resource, AutoGen's model client
    if isinstance(inner, base):
        return [inner]
    held = []
    for value in getattr(obj, "__dict__", {}).values():  # LangChain's ChatOpenAI: root_client, root_async_client
        if isinstance(value, base):
            held.append(value)
        elif isinstance(getattr(value, "_client", None), base):
            held.append(value._client)
    return held


def exempt(client: Any) -> bool:
    """Whether a request of ``client`` made in this context keeps its own endpoint."""
    return _region.get() or id(client) in _clients.get()


@dataclass(slots=True)
class _Pending:
    url: str
    body: Any
    agent: str | None
    start: float
    sink: Any


_pending_lock = threading.Lock()
_pending: weakref.WeakKeyDictionary[Any, _Pending] = weakref.WeakKeyDictionary()


def note_request(options: Any, request: Any) -> None:
    """Remember an exempt request (an httpx/httpx2 ``Request``) so that its response is recorded."""
    sink = current_sink.get()
    if sink is None:
        return
    url = request.url
    record = _Pending(
        url=f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}",
        body=jsonable(getattr(options, "json_data", None)),
        agent=current_agent_name(),
        start=time.time(),
        sink=sink,
    )
    with _pending_lock:
        _pending[request] = record


def _record(response: Any, stream: bool) -> None:
    request = getattr(response, "request", None)
    if request is None:
        return
    with _pending_lock:
        record = _pending.pop(request, None)
    if record is None:
        return
    body: Any = None
    if not stream:
        try:
            body = response.json()
        except Exception:  # not read (a raw response), or not JSON
            body = None
    attributes: dict[str, Any] = {
        spans.PASSTHROUGH: True,
        "url": record.url,
        "status": response.status_code,
        "request": record.body,
        "response": body,
    }
    if stream:
        attributes["streamed"] = True
    record.sink.emit(
        SpanKind.LLM, spans.PASSTHROUGH_CALL, attributes, agent_name=record.agent, start_time=record.start
    )


def response_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap the SDK's ``_process_response`` (sync or async) to record the answer of a noted request."""
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def _process_response_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = await original(self, *args, **kwargs)
            if _pending:
                _record_guarded(kwargs)
            return result

        wrapper: Callable[..., Any] = _process_response_async
    else:

        @functools.wraps(original)
        def _process_response(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            if _pending:
                _record_guarded(kwargs)
            return result

        wrapper = _process_response
    wrapper.__tether_passthrough__ = True  # type: ignore[attr-defined]
    return wrapper


def _record_guarded(kwargs: dict[str, Any]) -> None:
    try:
        _record(kwargs.get("response"), bool(kwargs.get("stream")))
    except Exception:  # a capture bug must not fail the call
        log.exception("tether could not record a passthrough call")
