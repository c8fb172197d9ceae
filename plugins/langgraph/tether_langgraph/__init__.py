"""tether's ``langgraph`` plugin: trains LangGraph graphs unchanged (``pip install "tether[langgraph]"``).

``LangGraphAdapter`` runs a compiled graph on each task and captures its model and tool calls through a
global LangChain callback handler, naming each call after the graph node that made it
(``langgraph_node``). Model calls reach tether's proxy through tether's endpoint redirect,
whose ``X-Tether-Agent`` header carries the node name (read from LangChain's own config context variable).
LangSmith tracing is switched off inside rollouts. Importing this module does not import LangChain or
LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from tether.plugin.adapters import Adapter
from tether.plugin.hookspecs import hookimpl
from tether_langchain_base.hooks import no_langsmith_tracing
from tether_langgraph.adapter import LangGraphAdapter, node_name

EXTRA = "langgraph"
REQUIRES = ("langgraph", "langchain_core", "langchain_openai")

__all__ = ["EXTRA", "REQUIRES", "LangGraphAdapter", "node_name", "register_adapters", "rollout_context"]


@hookimpl
def register_adapters(register: Callable[[Adapter], None]) -> None:
    register(LangGraphAdapter())


@hookimpl
def rollout_context(rollout: Any) -> AbstractAsyncContextManager[Any]:
    """Keep LangSmith from uploading traces of rollouts (whatever the adapter: any agent may use LangChain)."""
    return no_langsmith_tracing()
