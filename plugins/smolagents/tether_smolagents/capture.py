"""What the ``smolagents`` plugin installs while it captures: the agent name of each model request, and a ``tool``
span for each tool call and each call of a managed agent.

- **Names.** smolagents keeps no record of the running agent that a model request could read, and its agents
  are synchronous. ``MultiStepAgent.run`` is wrapped to run under the agent's name
  (``tether.capture.context.agent_scope``): a managed agent is called through ``MultiStepAgent.__call__``, which
  calls ``run`` in the same thread, so its model requests carry its own name, and its manager's name is back
  when it returns; a streamed run (``run(stream=True)`` returns a generator) gets the name around each step.
  Tool calls that a ``ToolCallingAgent`` runs in parallel go to a thread pool that copies the context, so they
  keep the name. ``agent_label(agent)`` is the name: the agent's ``name`` (required of managed agents), else,
  for a top-level agent left unnamed, the module variable that holds it (``tether.plugin.naming``), else its
  class name.
- **Tools.** ``Tool.__call__`` (every tool, however called: by a ``ToolCallingAgent``'s tool call or from the
  Python a ``CodeAgent`` wrote) and ``MultiStepAgent.__call__`` (a managed agent called by its manager) are
  wrapped to emit a ``tool`` span named by the calling agent, with the arguments and the result or the error.
- **The code thread.** A ``CodeAgent``'s local executor runs the model's Python in a fresh one-thread pool (its
  execution timeout, ``smolagents.local_python_executor.timeout``), which does not carry the caller's context:
  a managed agent called from that code would lose the rollout (its requests unredirected) and its name.
  ``timeout_wrapper`` runs the code in a copy of the caller's context.

Importing this module does not import smolagents.
"""

from __future__ import annotations

import contextvars
import functools
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

from tether import spans
from tether.capture.context import agent_scope, current_agent_name, current_scope
from tether.plugin.adapters import SpanSink, json_safe
from tether.plugin.naming import global_name
from tether.types import SpanKind

#: names given to rollout copies of unnamed agents (a copy is held by no module variable)
_labels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def agent_label(agent: Any) -> str:
    """The name tether records for a smolagents agent's calls (see the module docstring)."""
    name = getattr(agent, "name", None)
    if isinstance(name, str) and name:
        return name
    label = _labels.get(agent)
    if label is None:
        label = global_name(agent) or type(agent).__name__
        _labels[agent] = label
    return label


def copy_label(original: Any, copy: Any) -> None:
    """Give ``copy`` (a rollout copy) the label of ``original``."""
    if not getattr(copy, "name", None):
        _labels[copy] = agent_label(original)


def run_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``MultiStepAgent.run`` under the agent's name (a streamed run: around each step)."""

    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = agent_label(self)
        with agent_scope(name):
            result = original(self, *args, **kwargs)
        if isinstance(result, Generator):
            return _named_steps(result, name)
        return result

    return run


def _named_steps(steps: Generator[Any, None, Any], name: str) -> Iterator[Any]:
    while True:
        with agent_scope(name):
            try:
                step = next(steps)
            except StopIteration as stop:
                return stop.value
        yield step


def timeout_wrapper(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``local_python_executor.timeout(seconds)`` whose timed function runs in a copy of the caller's context."""

    @functools.wraps(original)
    def timeout(seconds: Any) -> Any:
        decorate = original(seconds)

        def apply(func: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(func)
            def call(*args: Any, **kwargs: Any) -> Any:
                context = contextvars.copy_context()  # in the caller's thread
                return decorate(functools.partial(context.run, func))(*args, **kwargs)

            return call

        return apply

    return timeout


def tool_wrapper(original: Callable[..., Any], sink: Callable[[], SpanSink | None]) -> Callable[..., Any]:
    """``Tool.__call__`` emitting a ``tool`` span per call inside a rollout."""

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = sink()
        if target is None or current_scope.get() is None:
            return original(self, *args, **kwargs)
        arguments = {k: v for k, v in kwargs.items() if k != "sanitize_inputs_outputs"}
        if len(args) == 1 and not arguments and isinstance(args[0], dict):
            arguments = dict(args[0])
        elif args:  # positional: by the tool's declared inputs, in order
            names = [*list(getattr(self, "inputs", None) or {}), *(f"arg{i}" for i in range(len(args)))]
            arguments = {**dict(zip(names, args, strict=False)), **arguments}
        return _traced(
            target, str(getattr(self, "name", type(self).__name__)), arguments, original, self, args, kwargs
        )

    return call


def managed_call_wrapper(original: Callable[..., Any], sink: Callable[[], SpanSink | None]) -> Callable[..., Any]:
    """``MultiStepAgent.__call__`` (a managed agent called by its manager) emitting a ``tool`` span."""

    @functools.wraps(original)
    def call(self: Any, task: str, **kwargs: Any) -> Any:
        target = sink()
        if target is None or current_scope.get() is None:
            return original(self, task, **kwargs)
        arguments = {"task": task, **kwargs}
        return _traced(target, agent_label(self), arguments, original, self, (task,), kwargs)

    return call


def _traced(
    sink: SpanSink,
    name: str,
    arguments: dict[str, Any],
    original: Callable[..., Any],
    owner: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    caller = current_agent_name()
    start = time.time()
    try:
        result = original(owner, *args, **kwargs)
    except BaseException as exc:
        attributes = spans.tool_attributes(name, json_safe(arguments), error=f"{type(exc).__name__}: {exc}")
        sink.emit(SpanKind.TOOL, name, attributes, agent_name=caller, start_time=start)
        raise
    attributes = spans.tool_attributes(name, json_safe(arguments), result=json_safe(result))
    sink.emit(SpanKind.TOOL, name, attributes, agent_name=caller, start_time=start)
    return result
