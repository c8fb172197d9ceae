"""The LangChain callback handler that turns a graph's model and tool calls into tether spans, named by node.

Imported only by ``LangGraphAdapter.instrument`` (it subclasses LangChain's ``BaseCallbackHandler``). The events
and spans are the shared base's (``tether_langchain_base.callbacks.CallbackCapture``, shared with the ``langchain``
plugin); this handler names each call after the node of the wrapped graph that made it
(``tether_langgraph.adapter.agent_node``: a subgraph's calls after the outer node) and
gives each root run an ``other`` span named ``graph`` with ``graph.name`` (the graph being invoked).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from tether_langchain_base.callbacks import CallbackCapture
from tether_langgraph.adapter import agent_node


class TetherCallbackHandler(CallbackCapture, BaseCallbackHandler):
    """Sends LangChain events to ``sink`` while it is set; inert when ``sink`` is None."""

    root_span = "graph"

    def _model_agent(self, parent_run_id: UUID | None, name: str, metadata: dict[str, Any] | None) -> str | None:
        return _node(metadata)

    def _tool_agent(self, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> str | None:
        return _node(metadata)


def _node(metadata: dict[str, Any] | None) -> str | None:
    return agent_node(metadata)
