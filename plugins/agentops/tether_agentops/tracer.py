"""``AgentOpsTracer``: reads the spans of the user's own AgentOps instrumentation into tether.

It never imports or initialises AgentOps. It attaches only to an AgentOps the user has initialised
(``agentops.init(...)`` in their code): then it adds one span processor to AgentOps' tracer provider, and
``uninstrument`` takes exactly that processor out again, leaving the global OpenTelemetry state as it found it.
If AgentOps is initialised later (inside the agent's first run), the plugin's ``rollout_context`` attaches then.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from tether.plugin.adapters import SpanSink, Tracer
from tether_agentops.offline import offline_problems

if TYPE_CHECKING:
    from tether_agentops.processor import TetherSpanProcessor

log = logging.getLogger(__name__)


def agentops_provider() -> Any | None:
    """The tracer provider of an AgentOps the user has initialised in this process, else None."""
    core = sys.modules.get("agentops.sdk.core")
    tracer = getattr(core, "tracer", None) if core is not None else None
    if tracer is None or not getattr(tracer, "initialized", False):
        return None
    return getattr(tracer, "provider", None)


class AgentOpsTracer(Tracer):
    """Stores AgentOps' spans (LLM calls, tools, agents, tasks) as tether spans of the running rollout."""

    name = "agentops"

    def __init__(self) -> None:
        super().__init__()
        self._processor: TetherSpanProcessor | None = None
        self._provider: Any | None = None
        self._warned = False

    @property
    def attached(self) -> bool:
        """True while tether's processor is in AgentOps' provider and reads its spans."""
        return self._provider is not None and self._processor is not None and self._processor.sink is not None

    @property
    def processor(self) -> TetherSpanProcessor | None:
        return self._processor

    def _instrument(self, sink: SpanSink) -> None:
        self.attach()

    def _repoint(self, sink: SpanSink) -> None:
        self.attach()

    def attach(self) -> bool:
        """Attach to the user's AgentOps if it is initialised now (idempotent); True when attached."""
        sink = self.sink
        if sink is None:
            return False
        provider = agentops_provider()
        if provider is None:
            return False
        from tether_agentops.processor import TetherSpanProcessor, add_to, processors_of, remove_from

        if self._provider is not None and self._provider is not provider and self._processor is not None:
            remove_from(self._provider, self._processor)  # AgentOps was re-initialised with a new provider
            self._provider = None
        if self._processor is None:
            self._processor = TetherSpanProcessor()
        self._processor.sink = sink
        if not any(p is self._processor for p in processors_of(provider)):
            add_to(provider, self._processor)
        self._provider = provider
        self._warn_if_online()
        return True

    def _uninstrument(self) -> None:
        if self._processor is None:
            return
        self._processor.sink = None  # inert at once, even before it is taken out
        self._processor.forget()
        if self._provider is not None:
            from tether_agentops.processor import remove_from

            if remove_from(self._provider, self._processor):
                self._provider = None
            # else: an unfamiliar provider keeps the inert processor; attach() reuses it

    def _warn_if_online(self) -> None:
        if self._warned:
            return
        problems = offline_problems()
        if problems:
            self._warned = True
            log.warning(
                "AgentOps is not offline: %s. Call tether_agentops.use_offline() before agentops.init() to keep "
                "training runs on this machine.",
                "; ".join(problems),
            )
