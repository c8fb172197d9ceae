"""What the Agent Framework adapter patches to name and capture calls, and how it undoes it.

- ``RawAgent.run`` (every ``Agent``'s run, under its middleware and telemetry layers): the run's model calls are
  made under ``tether.capture.context.agent_scope(agent.name)``, so the endpoint redirect's ``X-Tether-Agent``
  header names the agent on the proxy's span (the one with token ids). A non-streamed run is awaited inside the
  scope. A streamed run (``stream=True``, which is how ``agent.as_tool()`` runs a sub-agent) returns its
  ``ResponseStream`` before any model call, and the stream is consumed elsewhere (by the calling agent's tool),
  so the scope is registered on the stream itself (``ResponseStream.with_pull_context_manager``: entered around
  each pull of the underlying iterator). Agent middleware that sets a context variable around ``call_next()``
  misses streamed runs for exactly this reason.
- ``Executor.execute`` (workflows): each executor's handler runs under its executor id unless an agent is
  already named; an ``AgentExecutor``'s agent names its own calls (its run is inside), a custom executor that
  calls a chat client itself is named by its id.
- ``FunctionTool.invoke``: every function tool call (the agent's own functions, ``as_tool()`` sub-agents)
  becomes a ``tool`` span with its name, arguments, call id, result text or error, and the name of the agent
  whose model asked for it.

Capture never breaks the agent: a span that cannot be built is logged (debug) and skipped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from tether import spans
from tether.capture.context import agent_scope, current_agent, current_agent_name
from tether.plugin.adapters import SpanSink, json_safe
from tether.types import SpanKind

log = logging.getLogger(__name__)


def make_run_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``RawAgent.run`` so the run's model calls carry the agent's name (see the module docstring)."""

    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self, "name", None) or None
        if not name:
            return original(self, *args, **kwargs)
        with agent_scope(name):
            result = original(self, *args, **kwargs)
        pull = getattr(result, "with_pull_context_manager", None)
        if callable(pull):  # a ResponseStream: consumed later, wherever its consumer runs
            return pull(functools.partial(agent_scope, name))
        if hasattr(result, "__await__"):
            return _scoped(name, result)
        return result

    return run


async def _scoped(name: str, awaitable: Awaitable[Any]) -> Any:
    with agent_scope(name):
        return await awaitable


@contextlib.contextmanager
def _executor_scope(executor: Any) -> Iterator[None]:
    if current_agent.get():
        yield
        return
    with agent_scope(getattr(executor, "id", None) or None):
        yield


def make_execute_wrapper(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap ``Executor.execute`` so an executor's own model calls are named by its id."""

    @functools.wraps(original)
    async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _executor_scope(self):
            return await original(self, *args, **kwargs)

    return execute


def make_invoke_wrapper(
    original: Callable[..., Awaitable[Any]], sink_of: Callable[[], SpanSink | None]
) -> Callable[..., Awaitable[Any]]:
    """Wrap ``FunctionTool.invoke`` to record each call as a ``tool`` span."""

    @functools.wraps(original)
    async def invoke(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        agent = current_agent_name()
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            _emit(sink_of(), self, kwargs, start, agent, error=f"{type(exc).__name__}: {exc}")
            raise
        _emit(sink_of(), self, kwargs, start, agent, result=result)
        return result

    return invoke


def _emit(
    sink: SpanSink | None,
    tool: Any,
    kwargs: dict[str, Any],
    start: float,
    agent: str | None,
    *,
    result: Any = None,
    error: str | None = None,
) -> None:
    if sink is None:
        return
    try:
        name = str(getattr(tool, "name", None) or type(tool).__name__)
        arguments: Any = kwargs.get("arguments")
        if arguments is None and kwargs.get("context") is not None:
            arguments = getattr(kwargs["context"], "arguments", None)
        dump = getattr(arguments, "model_dump", None)
        if callable(dump):
            arguments = dump(mode="json")
        attributes = spans.tool_attributes(
            name,
            json_safe(arguments),
            result=None if error is not None else result_text(result),
            error=error,
            call_id=kwargs.get("tool_call_id"),
        )
        sink.emit(SpanKind.TOOL, name, attributes, agent_name=agent, start_time=start)
    except Exception:  # never let capture break the agent
        log.debug("tether_agent_framework could not capture a tool call", exc_info=True)


def result_text(result: Any) -> Any:
    """A tool's result as the model is told it: the text of its ``Content`` items, else JSON-safe."""
    if isinstance(result, list) and result and all(hasattr(item, "type") for item in result):
        texts = [getattr(item, "text", None) for item in result]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if t is not None)
    return json_safe(result)
