"""The LangChain callback handler that turns a runnable's model and tool calls into tether spans, named by agent.

Imported only by ``LangChainAdapter.instrument`` (it subclasses LangChain's ``BaseCallbackHandler``). The events
and spans are the shared base's (``tether_langchain_base.callbacks.CallbackCapture``, shared with the ``langgraph``
plugin); this handler enters every chain and tool run in a ``RunTree`` (``tether_langchain.names``), which names
the calls, and gives each root run an ``other`` span named ``chain`` with ``chain.name`` (the runnable invoked).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from tether_langchain.names import RunTree
from tether_langchain_base.callbacks import CallbackCapture


class LangChainHandler(CallbackCapture, BaseCallbackHandler):
    """Sends LangChain events to ``sink`` while it is set; inert when ``sink`` is None."""

    root_span = "chain"

    def __init__(self, tree: RunTree) -> None:
        super().__init__()
        self.tree = tree

    def _model_agent(self, parent_run_id: UUID | None, name: str, metadata: dict[str, Any] | None) -> str | None:
        return self.tree.agent_of(parent_run_id) if parent_run_id is not None else name

    def _tool_agent(self, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> str | None:
        return self.tree.agent_of(parent_run_id)

    def _run_started(
        self, run_id: UUID, parent_run_id: UUID | None, name: str, metadata: dict[str, Any] | None
    ) -> None:
        self.tree.start(run_id, parent_run_id, name, metadata)

    def _run_ended(self, run_id: UUID) -> None:
        self.tree.end(run_id)

    def _forget(self) -> None:
        self.tree.clear()
