"""The adapter for compiled LangGraph graphs.

Capture has two parts, both installed by ``instrument`` and removed exactly by ``uninstrument``:

- A global LangChain callback handler (``tether_langgraph.capture``), attached to every LangChain run in the
  process through a configure hook (``tether_langchain_base.hooks.ConfigureHook``, shared with the
  ``langchain`` plugin): ``uninstrument`` detaches the handler (it drops every event once it has no sink) and
  takes the hook out of LangChain's private hook list where that list still is.
- An agent-name resolver (``tether.capture.context.add_agent_resolver``) that reads the running graph node from
  LangChain's config context variable (``var_child_runnable_config`` → its metadata). The endpoint redirect
  (``tether.capture.redirect``) calls it for the ``X-Tether-Agent`` header of every SDK request, so the proxy's
  span of the call — the one with token ids — is named after the node.

A call is named after the node **of the wrapped graph** that made it (``agent_node``): inside a subgraph (a
``create_react_agent`` added as the node ``math_agent``, whose own node is ``agent``) that is the outer node,
the first part of LangGraph's ``langgraph_checkpoint_ns`` (``math_agent:<task id>|agent:<task id>``), so
``optimize=["math_agent"]`` names what the graph's author named; outside subgraphs it is ``langgraph_node``.

``run`` feeds a task to the graph with ``ainvoke``: a dict is the graph's input state, a string becomes
``{"messages": [("user", task)]}``. The runner holds the endpoint redirect around the rollout.
"""

from __future__ import annotations

import sys
from typing import Any

from tether.capture.context import add_agent_resolver, remove_agent_resolver
from tether.plugin.adapters import Adapter, SpanSink
from tether.types import Resources
from tether_langchain_base.hooks import ConfigureHook


def node_name() -> str | None:
    """The LangGraph node running in this context (None outside a node, or when LangChain isn't loaded)."""
    config_module = sys.modules.get("langchain_core.runnables.config")
    if config_module is None:
        return None
    config = config_module.var_child_runnable_config.get()
    if not config:
        return None
    return agent_node(config.get("metadata"))


def agent_node(metadata: dict[str, Any] | None) -> str | None:
    """The node of the outermost graph running a call, from LangChain run metadata: the first segment of
    ``langgraph_checkpoint_ns`` (``outer:<id>|inner:<id>``; LangGraph refuses ``|`` and ``:`` in node names),
    else ``langgraph_node``; None outside a graph."""
    metadata = metadata or {}
    namespace = metadata.get("langgraph_checkpoint_ns")
    if isinstance(namespace, str) and namespace:
        outer = namespace.split("|", 1)[0].partition(":")[0]
        if outer:
            return outer
    node = metadata.get("langgraph_node")
    return node if isinstance(node, str) and node else None


def _made_by_create_agent(agent: Any) -> bool:
    """A graph returned by ``langchain.agents.create_agent`` (it tags its config's metadata)."""
    config = getattr(agent, "config", None)
    metadata = config.get("metadata") if isinstance(config, dict) else None
    return isinstance(metadata, dict) and metadata.get("ls_integration") == "langchain_create_agent"


class LangGraphAdapter(Adapter):
    """Runs compiled LangGraph graphs; captures model and tool calls with the node that made them."""

    name = "langgraph"
    extra = "langgraph"
    #: compiled graphs: ``CompiledStateGraph`` and functional-API entrypoints are ``Pregel``s
    agent_types = (("langgraph.pregel.main", "Pregel"), ("langgraph.pregel", "Pregel"))

    def __init__(self) -> None:
        super().__init__()
        #: the handler's registration (pickled without it, for ``tether.RayRunners``: a copy registers its own)
        self._hook: ConfigureHook[Any] = ConfigureHook("tether_langgraph_handler")

    def accepts(self, agent: Any) -> bool:
        # a graph made by create_agent is LangChain's agent: the langchain plugin's, named by the agent
        return not _made_by_create_agent(agent) and super().accepts(agent)

    def _instrument(self, sink: SpanSink) -> None:
        from tether_langgraph.capture import TetherCallbackHandler

        self._hook.attach(TetherCallbackHandler).sink = sink
        add_agent_resolver(node_name)

    def _repoint(self, sink: SpanSink) -> None:
        if self._hook.handler is not None:
            self._hook.handler.sink = sink

    def _uninstrument(self) -> None:
        remove_agent_resolver(node_name)
        if self._hook.handler is not None:
            self._hook.handler.detach()  # inert even if the hook cannot be unlinked below
        self._hook.remove()

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        if isinstance(task, dict):
            state: Any = task
        elif isinstance(task, str):
            state = {"messages": [("user", task)]}
        else:
            raise TypeError(
                f"the langgraph adapter feeds a dict task to the graph as its input state and a str task as a "
                f"user message; got {type(task).__name__}: pass run=lambda graph, task: graph.ainvoke(...) "
                "to tether.wrap to say how"
            )
        return await agent.ainvoke(state)
