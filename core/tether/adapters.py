"""The adapter contract that framework plugins implement, and the span sink adapters write to.

An ``Adapter`` knows one agent framework: whether an object belongs to it (``accepts``, which looks in
``sys.modules`` and never imports the framework), how to capture its model and tool calls (``instrument``
a sink, idempotently; ``uninstrument`` exactly), and how to run one task on it (``run``). A ``Tracer`` only
captures. Both are registered through the hooks in ``tether.hookspecs``.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from tether.types import Resources, SpanKind


class SpanSink(Protocol):
    """Where adapters and tracers send what they capture. The sink knows which rollout and attempt is
    current (from context), stamps the span with it, and batches spans to the store."""

    def emit(
        self,
        kind: SpanKind,
        name: str,
        attributes: dict[str, Any],
        *,
        agent_name: str | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        parent_id: str | None = None,
    ) -> None: ...


class Tracer(abc.ABC):
    """Captures spans from some instrumentation layer into a sink."""

    name: str = ""

    @abc.abstractmethod
    def instrument(self, sink: SpanSink) -> None:
        """Start sending captured calls to ``sink``. Calling it again with the same sink changes nothing."""

    @abc.abstractmethod
    def uninstrument(self) -> None:
        """Undo exactly what ``instrument`` did; a no-op when not instrumented."""


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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
