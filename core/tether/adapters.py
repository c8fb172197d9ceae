"""The adapter contract that framework plugins implement, and the span sink adapters write to.

An ``Adapter`` knows one agent framework: whether an object belongs to it (``accepts``, which looks in
``sys.modules`` and never imports the framework), how to capture its model and tool calls (``instrument``
a sink, idempotently; ``uninstrument`` exactly), how to run one task on it (``run``), and what must surround
any run of it, the user's own ``run=`` included (``run_scope``). A ``Tracer`` only captures. Both are
registered through the hooks in ``tether.hookspecs``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tether.instrument import Instrumentor
from tether.instrument import SpanSink as SpanSink
from tether.types import Resources, check_reward


class Tracer(Instrumentor, abc.ABC):
    """Captures spans from some instrumentation layer into a sink: ``instrument(sink)`` /
    ``uninstrument()`` come from ``Instrumentor`` (idempotent, exact); a tracer implements ``_instrument``
    and ``_uninstrument``."""

    name: str = ""


class Adapter(Tracer):
    """Runs and captures the agents of one framework."""

    #: ``pip install "tether[<extra>]"`` installs what this adapter needs.
    extra: str | None = None

    @abc.abstractmethod
    def accepts(self, agent: Any) -> bool:
        """True if ``agent`` is an object of this adapter's framework. Must not import the framework: look
        in ``sys.modules`` (if the framework is not imported, the agent cannot be one of its objects)."""

    @abc.abstractmethod
    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        """Run ``agent`` on one task input with ``resources`` (the endpoint is already scoped to the
        rollout) and return the agent's output."""

    def run_scope(self, agent: Any) -> contextlib.AbstractContextManager[Any]:
        """What surrounds every run of ``agent`` so that its calls are captured and named: ``run`` enters it,
        and so does a wrapped agent that feeds tasks through the user's ``run=``. Default: nothing."""
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


RewardFn = Callable[[Any, Any], float | Awaitable[float]]
RunFn = Callable[..., Any]  # run(agent, task) or run(agent, task, resources)


@dataclass(slots=True)
class WrappedAgent:
    """An agent ready to train: the user's object, the adapter that runs it, how to score it, and which
    sub-agents may be optimized (None: all of them)."""

    agent: Any
    adapter: Adapter
    reward: RewardFn | None = None
    optimize: frozenset[str] | None = None
    run: RunFn | None = None

    async def run_task(self, task: Any, resources: Resources) -> Any:
        """Run one task: the user's ``run=`` if given (sync ones in a worker thread), else the adapter's.
        A ``run`` with a third parameter also gets the rollout's resources (prompt templates, endpoint).
        The user's ``run`` runs inside the adapter's ``run_scope``, so its calls are captured and named
        as the adapter's own runs are."""
        if self.run is None:
            return await self.adapter.run(self.agent, task, resources)
        args = (self.agent, task, resources) if _takes_resources(self.run) else (self.agent, task)
        with self.adapter.run_scope(self.agent):
            if inspect.iscoroutinefunction(self.run):
                return await self.run(*args)
            # to_thread copies the context, so the scope's context variables reach the worker thread
            result = await asyncio.to_thread(self.run, *args)
            if inspect.isawaitable(result):
                result = await result
            return result

    async def score(self, task: Any, output: Any) -> float | None:
        """The ``reward`` function's value for this output (None when there is no reward function)."""
        if self.reward is None:
            return None
        value = self.reward(task, output)
        if inspect.isawaitable(value):
            value = await value
        return check_reward(value)

    def is_trainable(self, agent_name: str | None) -> bool:
        return self.optimize is None or (agent_name is not None and agent_name in self.optimize)


def wrap(
    agent: Any,
    *,
    reward: RewardFn | None = None,
    optimize: Iterable[str] | str | None = None,
    adapter: str | Adapter | None = None,
    run: RunFn | None = None,
) -> WrappedAgent:
    """Make ``agent`` trainable without changing it.

    ``reward(task, output)`` scores a rollout (or the agent calls ``tether.emit_reward``); ``optimize`` names
    the sub-agents whose calls are trained (default: all); ``adapter`` picks the adapter by name when the
    automatic choice is ambiguous; ``run(agent, task)`` overrides how a task is fed to the agent
    (``run(agent, task, resources)`` also gets the rollout's resources, e.g. the prompt templates APO tunes).
    """
    from tether.plugins import get_plugins

    if reward is not None and not callable(reward):
        raise TypeError(f"reward must be a function (task, output) -> float, got {type(reward).__name__}")
    if run is not None and not callable(run):
        raise TypeError(f"run must be a function (agent, task) -> output, got {type(run).__name__}")
    plugins = get_plugins()
    if isinstance(adapter, Adapter):
        chosen = adapter
    elif isinstance(adapter, str):
        chosen = plugins.adapter_named(adapter)
    elif adapter is None:
        chosen = plugins.adapter_for(agent)
    else:
        raise TypeError(f'adapter must be an adapter name such as "langgraph" or an Adapter, got {adapter!r}')
    return WrappedAgent(agent=agent, adapter=chosen, reward=reward, optimize=_agent_names(optimize), run=run)


def _takes_resources(run: RunFn) -> bool:
    """True if ``run`` accepts a third positional argument (the resources)."""
    try:
        params = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


def _agent_names(optimize: Iterable[str] | str | None) -> frozenset[str] | None:
    if optimize is None:
        return None
    names = [optimize] if isinstance(optimize, str) else list(optimize)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad or not names:
        raise ValueError(f"optimize= takes sub-agent names (non-empty strings), got {optimize!r}")
    return frozenset(names)


# -- helpers for adapter authors ---------------------------------------------------------------------------


def json_safe(value: Any) -> Any:
    """A JSON-safe deep copy of ``value`` for a span attribute: what JSON cannot hold becomes its text."""
    from tether import _json

    try:
        return _json.clone(value)
    except TypeError:
        return json.loads(json.dumps(value, default=str))


def tool_arguments(raw: Any) -> Any:
    """A tool call's arguments as the model sent them: parsed when they are JSON text, else as given."""
    if isinstance(raw, str):
        try:
            return json_safe(json.loads(raw))
        except ValueError:
            return raw
    return json_safe(raw)
