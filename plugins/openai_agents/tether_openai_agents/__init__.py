"""tether's ``openai_agents`` plugin: trains OpenAI Agents SDK agents unchanged, handoffs included
(``pip install "tether[openai-agents]"``).

``OpenAIAgentsAdapter`` runs an ``agents.Agent`` on each task with ``Runner.run`` against the rollout's
endpoint (Chat Completions) and captures every model call, tool call (failures included) and handoff with
the name of the agent that made it, through the SDK's trace processors. Inside rollouts tether's processor
replaces the SDK's, so no trace is uploaded to api.openai.com. Importing this module does not import the
SDK.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from tether.plugin.hookimpls import adapters_hook, rollout_hook
from tether_openai_agents import gate
from tether_openai_agents.adapter import OpenAIAgentsAdapter, agent_name, rollout_run_config, task_input

EXTRA = "openai-agents"
REQUIRES = ("agents", "openai")

__all__ = [
    "EXTRA",
    "REQUIRES",
    "OpenAIAgentsAdapter",
    "agent_name",
    "register_adapters",
    "rollout_context",
    "rollout_run_config",
    "task_input",
]

register_adapters = adapters_hook(OpenAIAgentsAdapter)


@contextlib.asynccontextmanager
async def _no_trace_upload() -> AsyncIterator[None]:
    """Keep the SDK's tracing from uploading rollouts, whatever the adapter (a plain function or another
    framework's agent may run an Agents SDK agent inside)."""
    if "agents.tracing" not in sys.modules:  # the SDK is not in use in this process
        yield
        return
    gate.hold()
    try:
        yield
    finally:
        gate.release()


rollout_context = rollout_hook(_no_trace_upload)
