"""tether's ``langgraph`` plugin: trains LangGraph graphs unchanged (``pip install "tether[langgraph]"``).

``LangGraphAdapter`` runs a compiled graph on each task and captures its model and tool calls through a
global LangChain callback handler, naming each call after the graph node that made it
(``langgraph_node``). Model calls reach tether's proxy through tether's endpoint redirect,
whose ``X-Tether-Agent`` header carries the node name (read from LangChain's own config context variable).
LangSmith tracing is switched off inside rollouts. Importing this module does not import LangChain or
LangGraph.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook, rollout_hook
from tether_langchain_base.hooks import no_langsmith_tracing
from tether_langgraph.adapter import LangGraphAdapter, node_name

EXTRA = "langgraph"
REQUIRES = ("langgraph", "langchain_core", "langchain_openai")

__all__ = ["EXTRA", "REQUIRES", "LangGraphAdapter", "node_name", "register_adapters", "rollout_context"]

register_adapters = adapters_hook(LangGraphAdapter)
#: keep LangSmith from uploading traces of rollouts (whatever the adapter: any agent may use LangChain)
rollout_context = rollout_hook(no_langsmith_tracing)
