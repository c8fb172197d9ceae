"""tether's ``pydantic_ai`` plugin: trains PydanticAI agents unchanged, agents delegated to from tools included
(``pip install "tether[pydantic-ai]"``).

``PydanticAIAdapter`` runs a ``pydantic_ai.Agent`` on each task with ``agent.run`` and captures every tool call
with the name of the agent that made it; every model request (Responses or Chat Completions) reaches tether's
proxy through the endpoint redirect, named by the agent whose run is current. Importing this module does not
import PydanticAI.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_pydantic_ai.adapter import DepsNeeded, PydanticAIAdapter, PydanticAIOutput, summarize
from tether_pydantic_ai.capture import agent_name

EXTRA = "pydantic-ai"
REQUIRES = ("pydantic_ai", "openai")

__all__ = [
    "EXTRA",
    "REQUIRES",
    "DepsNeeded",
    "PydanticAIAdapter",
    "PydanticAIOutput",
    "agent_name",
    "register_adapters",
    "summarize",
]

register_adapters = adapters_hook(PydanticAIAdapter)
