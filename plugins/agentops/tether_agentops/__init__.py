"""tether's ``agentops`` plugin: for agents already instrumented with AgentOps, their AgentOps spans become
tether spans (``pip install "tether[agentops]"``).

Opting in is what an AgentOps user already does: call ``agentops.init(...)`` in your code. tether never imports
nor initialises AgentOps itself (AgentOps replaces the global OpenTelemetry tracer provider, patches ``print``
and instruments LLM clients; that is the user's decision, and OpenTelemetry cannot undo a global provider).
When AgentOps is initialised, the tracer adds one span processor to its provider for the duration of a run and
takes it out afterwards; when it is not, the plugin does nothing. ``TETHER_DISABLE_PLUGINS=agentops`` turns
it off entirely.

To train offline (no key, nothing sent, no ``./agentops.log``), call ``tether_agentops.use_offline()`` before
``agentops.init`` runs (or export the variables of ``offline_env()``); the tracer logs a warning when the
AgentOps it attaches to would reach beyond this machine.

Kinds: AgentOps LLM spans → ``llm`` (with ``request.messages`` rebuilt from ``gen_ai.prompt.*``), tool spans
→ ``tool``, everything else (agents, tasks, operations, sessions) → ``other``. The agent name is the span's
``agent.name``, else its nearest AgentOps ``agent`` ancestor's name, else the sub-agent tether knows is running.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from tether.plugin.adapters import Tracer
from tether.plugin.hookspecs import hookimpl
from tether_agentops.offline import LOOPBACK_ENDPOINT, offline_env, offline_problems, use_offline
from tether_agentops.tracer import AgentOpsTracer, agentops_provider

EXTRA = "agentops"
REQUIRES = ("agentops",)

__all__ = [
    "EXTRA",
    "LOOPBACK_ENDPOINT",
    "REQUIRES",
    "AgentOpsTracer",
    "agentops_provider",
    "offline_env",
    "offline_problems",
    "register_tracers",
    "rollout_context",
    "tracer",
    "use_offline",
]

#: the plugin's one tracer (instrumented by every runner, whatever the adapter)
tracer = AgentOpsTracer()


@hookimpl
def register_tracers(register: Callable[[Tracer], None]) -> None:
    register(tracer)


@contextlib.asynccontextmanager
async def _attached() -> AsyncIterator[None]:
    tracer.attach()
    yield


@hookimpl
def rollout_context(rollout: Any) -> AbstractAsyncContextManager[Any] | None:
    """Attach to an AgentOps the agent initialised after the runner started (e.g. in its first rollout)."""
    if "agentops" not in sys.modules:
        return None
    return _attached()
