"""Which sub-agent a LangChain call belongs to: the innermost enclosing *agent run* of LangChain's run tree.

LangChain reports every run (chain, model, tool) to callback handlers with its ``run_id`` and
``parent_run_id``; ``RunTree`` keeps the runs that are still open and, for each, the agent name that calls
inside it carry. A run is an agent run, its name the agent's, when it is:

- the root run (the runnable ``tether.wrap`` was given, or whatever the rollout invoked first), or
- a run with a name of its own: an ``AgentExecutor`` (``"AgentExecutor"``, or its ``name=``), a runnable named
  with ``.with_config(run_name=...)`` or ``name=``, a ``create_agent`` graph (its ``name=``), a function step
  (its function's name), a tool (for the calls made inside the tool: a sub-agent it runs).

Names LangChain makes up for its plumbing — ``RunnableSequence``, ``RunnableParallel<...>``,
``RunnableLambda`` and every other ``Runnable...`` class name — are not agents, and neither are the nodes of a
LangGraph graph (the runs named after their ``langgraph_node``): a ``create_agent`` graph's ``model`` and
``tools`` nodes are steps of the one agent. A model call is named after the agent run that encloses it; a
tool call after the agent run that called the tool. Pure Python: no LangChain import.
"""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID


def is_agent_name(name: str | None, metadata: dict[str, Any] | None) -> bool:
    """True when a (non-root) run of this name is an agent run: a name of its own, not LangChain plumbing
    nor a LangGraph node."""
    if not name or name.startswith("Runnable") or name == "<lambda>":
        return False
    return name != (metadata or {}).get("langgraph_node")


class RunTree:
    """The open runs of LangChain's run tree: run id -> (parent run id, agent name of the calls inside it)."""

    def __init__(self) -> None:
        self._runs: dict[UUID, tuple[UUID | None, str | None]] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[RunTree], tuple[()]]:
        """Pickled (with its adapter, for ``tether.RayRunners``) empty: open runs belong to this process."""
        return (RunTree, ())

    def start(self, run_id: UUID, parent_run_id: UUID | None, name: str | None, metadata: Any = None) -> None:
        """A run began: it is an agent run (root, or a name of its own), or inherits its parent's agent."""
        meta = metadata if isinstance(metadata, dict) else None
        with self._lock:
            if parent_run_id is None or is_agent_name(name, meta):
                agent = name or None
            else:
                agent = self._agent(parent_run_id)
            self._runs[run_id] = (parent_run_id, agent)

    def end(self, run_id: UUID) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def agent_of(self, run_id: UUID | None) -> str | None:
        """The agent name of calls made inside ``run_id`` (None: not an open run)."""
        with self._lock:
            return self._agent(run_id)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()

    def __len__(self) -> int:
        return len(self._runs)

    def _agent(self, run_id: UUID | None) -> str | None:
        entry = self._runs.get(run_id) if run_id is not None else None
        return entry[1] if entry is not None else None
