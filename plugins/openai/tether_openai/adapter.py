"""The adapter for plain Python functions that call the ``openai`` client.

``OpenAIFunctionAdapter`` runs a function (sync or async, or a ``functools.partial`` of one) on a task input.
It does not capture LLM spans itself: the endpoint redirect (``tether.capture.redirect``, held by the runner
around each rollout) sends every SDK request made inside the rollout to tether's proxy, which records the
request, the response, the token ids and the ``X-Tether-Agent`` header on its own span. Sync functions run in
a worker thread via ``asyncio.to_thread``, which copies the context, so the rollout scope (and hence the
redirect) carries over.

The sub-agent name of the function's calls is the function's ``__name__`` unless the caller (or the function,
with ``tether.capture.context.agent_scope``) names one. Tool calls are reported as ``tool`` spans from the tool
results the function sends back to the model (``tether_openai.tools``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from typing import Any

from tether.capture import redirect
from tether.capture.context import agent_scope, current_agent_name
from tether.plugin.adapters import Adapter, SpanSink
from tether.types import Resources, Task
from tether_openai.tools import ToolResultTracker, tracking_run


def _unwrap_partial(obj: Any) -> Any:
    while isinstance(obj, functools.partial):
        obj = obj.func
    return obj


def _is_plain_function(agent: Any) -> bool:
    func = _unwrap_partial(agent)
    if not inspect.isfunction(func):  # excludes classes, instances, bound methods, builtins
        return False
    return not (inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func))


def _default_name(agent: Any) -> str | None:
    name = getattr(_unwrap_partial(agent), "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else None  # not "<lambda>"


class OpenAIFunctionAdapter(Adapter):
    """Runs plain functions that call the openai SDK; model calls are captured by the proxy."""

    name = "openai"
    extra = "openai"

    def __init__(self) -> None:
        super().__init__()
        self._tools = ToolResultTracker()

    def accepts(self, agent: Any) -> bool:
        return "openai" in sys.modules and _is_plain_function(agent)

    def hint_for(self, agent: Any) -> str | None:
        if "openai" in sys.modules or not _is_plain_function(agent):
            return None
        return (
            "a plain function is run by the openai adapter, which takes it once the openai SDK is imported "
            "(this one imports it inside its body, after tether.wrap looked): pass adapter='openai' or "
            "import openai first"
        )

    def _instrument(self, sink: SpanSink) -> None:
        self._tools.sink = sink
        redirect.add_listener(self._tools)

    def _repoint(self, sink: SpanSink) -> None:
        self._tools.sink = sink

    def _uninstrument(self) -> None:
        redirect.remove_listener(self._tools)
        self._tools.sink = None

    @contextlib.contextmanager
    def run_scope(self, agent: Any) -> Iterator[None]:
        """Report tool results and name the calls after the function unless an enclosing ``tether.agent``
        scope already names them (the runner holds the endpoint redirect that sends them to the proxy)."""
        naming = contextlib.nullcontext() if current_agent_name() else agent_scope(_default_name(agent))
        with tracking_run(), naming:
            yield

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        payload = task.input if isinstance(task, Task) else task
        with self.run_scope(agent):
            if inspect.iscoroutinefunction(_unwrap_partial(agent)) or inspect.iscoroutinefunction(agent):
                return await agent(payload)
            result = await asyncio.to_thread(agent, payload)
            if inspect.isawaitable(result):  # a sync function that returned a coroutine
                return await result
            return result
