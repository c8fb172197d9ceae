"""tether's ``agent_framework`` plugin: trains Microsoft Agent Framework agents and workflows unchanged
(``pip install "tether[agent-framework]"``).

``AgentFrameworkAdapter`` runs an ``Agent`` (or a ``Workflow``: a fresh copy per rollout) on each task and
captures every model call with the name of the agent that made it — sub-agents run through ``as_tool()``
(streamed) and workflow executors included — and every function tool call with its arguments and result.
Model calls go to tether's proxy through tether's endpoint redirect, on the API the agent's client uses
(``OpenAIChatClient``: Responses; ``OpenAIChatCompletionClient``: Chat Completions). Importing this module does
not import Agent Framework.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_agent_framework.adapter import AgentFrameworkAdapter, AgentFrameworkOutput, summarize

EXTRA = "agent-framework"
REQUIRES = ("agent_framework", "agent_framework_openai", "openai")

__all__ = ["EXTRA", "REQUIRES", "AgentFrameworkAdapter", "AgentFrameworkOutput", "register_adapters", "summarize"]

register_adapters = adapters_hook(AgentFrameworkAdapter)
