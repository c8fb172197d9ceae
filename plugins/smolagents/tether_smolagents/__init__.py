"""tether's ``smolagents`` plugin: trains Hugging Face smolagents agents unchanged, managed agents included
(``pip install "tether[smolagents]"``).

``SmolagentsAdapter`` runs a copy of a ``ToolCallingAgent`` or ``CodeAgent`` per rollout in a worker thread and
captures every tool call and managed-agent call with the name of the agent that made it; every model request
reaches tether's proxy through the endpoint redirect, named by the agent whose run it is part of. Importing
this module does not import smolagents.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_smolagents.adapter import SmolagentsAdapter, SmolagentsOutput, summarize
from tether_smolagents.capture import agent_label

EXTRA = "smolagents"
REQUIRES = ("smolagents", "openai")

__all__ = [
    "EXTRA",
    "REQUIRES",
    "SmolagentsAdapter",
    "SmolagentsOutput",
    "agent_label",
    "register_adapters",
    "summarize",
]

register_adapters = adapters_hook(SmolagentsAdapter)
