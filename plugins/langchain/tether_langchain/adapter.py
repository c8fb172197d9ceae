"""The adapter for LangChain runnables: LCEL chains, ``AgentExecutor`` (``langchain_classic``), ``create_agent``
graphs, and any other ``Runnable``.

Capture is LangChain's own seam, installed by ``instrument`` and removed exactly by ``uninstrument``:

- A global callback handler (``tether_langchain.capture``), attached to every LangChain run in the process
  through a configure hook (``tether_langchain_base.hooks.ConfigureHook``, shared with the ``langgraph``
  plugin): ``uninstrument`` detaches the handler (it drops every event once it has no sink) and takes the hook
  out of LangChain's private hook list where that list still is.
- An agent-name resolver (``tether.capture.context.add_agent_resolver``): during a model call, LangChain's
  config context variable holds the child callback manager of the enclosing run; its ``parent_run_id`` names
  that run, whose agent the handler's ``RunTree`` knows. The endpoint redirect puts it in the
  ``X-Tether-Agent`` header, so the proxy's span of the call (the one with token ids) is named too.

Which adapter takes a LangGraph graph: graphs built with ``langchain.agents.create_agent`` are LangChain's agents
(this adapter: named by ``create_agent(name=...)``); other compiled graphs are the ``langgraph`` plugin's
(named by node).
"""

from __future__ import annotations

import sys
from typing import Any

from tether.capture.context import add_agent_resolver, remove_agent_resolver
from tether.plugin.adapters import Adapter, SpanSink, instance_of
from tether.types import Resources
from tether_langchain.names import RunTree
from tether_langchain_base.hooks import ConfigureHook

#: (module, class) of LangGraph's compiled graphs, which the langgraph adapter runs unless create_agent made them
_GRAPH_TYPES = (("langgraph.pregel.main", "Pregel"), ("langgraph.pregel", "Pregel"))
#: the metadata create_agent puts on the graphs it returns
_CREATE_AGENT = "langchain_create_agent"


def is_create_agent_graph(agent: Any) -> bool:
    """True for a graph returned by ``langchain.agents.create_agent`` (it tags its config's metadata)."""
    config = getattr(agent, "config", None)
    metadata = config.get("metadata") if isinstance(config, dict) else None
    return isinstance(metadata, dict) and metadata.get("ls_integration") == _CREATE_AGENT


class LangChainAdapter(Adapter):
    """Runs LangChain runnables; captures model and tool calls with the agent run that made them."""

    name = "langchain"
    extra = "langchain"
    agent_types = (("langchain_core.runnables.base", "Runnable"),)

    def __init__(self) -> None:
        super().__init__()
        self._tree = RunTree()
        #: the handler's registration (pickled without it, for ``tether.RayRunners``: a copy registers its own)
        self._hook: ConfigureHook[Any] = ConfigureHook("tether_langchain_handler")

    def accepts(self, agent: Any) -> bool:
        """A runnable, but a LangGraph graph only when ``create_agent`` made it (others: the langgraph plugin)."""
        return super().accepts(agent) and (not instance_of(agent, _GRAPH_TYPES) or is_create_agent_graph(agent))

    def agent_name(self) -> str | None:
        """The agent of the model call running in this context (the resolver behind ``X-Tether-Agent``)."""
        config_module = sys.modules.get("langchain_core.runnables.config")
        if config_module is None:
            return None
        config = config_module.var_child_runnable_config.get()
        manager = (config or {}).get("callbacks")
        return self._tree.agent_of(getattr(manager, "parent_run_id", None))

    def _instrument(self, sink: SpanSink) -> None:
        from tether_langchain.capture import LangChainHandler

        self._hook.attach(lambda: LangChainHandler(self._tree)).sink = sink
        add_agent_resolver(self.agent_name)

    def _repoint(self, sink: SpanSink) -> None:
        if self._hook.handler is not None:
            self._hook.handler.sink = sink

    def _uninstrument(self) -> None:
        remove_agent_resolver(self.agent_name)
        if self._hook.handler is not None:
            self._hook.handler.detach()  # inert even if the hook cannot be unlinked below
        self._hook.remove()

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        return await agent.ainvoke(task_input(agent, task))


def task_input(agent: Any, task: Any) -> Any:
    """What ``ainvoke`` gets for a task: a dict (or anything not a string) as it is. A string becomes a
    ``create_agent`` graph's user message; the value of the one input key of a runnable that takes a dict (a
    chain's one ``input_keys`` entry, the one required property of its input schema); an ``AgentExecutor``'s
    ``input`` (the key of LangChain's agent prompts); else it is passed as it is (an LCEL chain whose first step
    takes text or messages)."""
    if not isinstance(task, str):
        return task
    if is_create_agent_graph(agent):
        return {"messages": [{"role": "user", "content": task}]}
    keys = getattr(agent, "input_keys", None)  # langchain_classic chains
    if isinstance(keys, list) and len(keys) == 1 and isinstance(keys[0], str):
        return {keys[0]: task}
    required = _required_input_keys(agent)
    if len(required) == 1:
        return {required[0]: task}
    if keys == [] and type(agent).__name__ == "AgentExecutor":  # its agent is a runnable: no declared keys
        return {"input": task}
    return task


def _required_input_keys(agent: Any) -> list[str]:
    try:
        schema = agent.get_input_jsonschema()
    except Exception:  # a runnable whose input schema cannot be built: feed the task as it is
        return []
    required = schema.get("required") if isinstance(schema, dict) and schema.get("type") == "object" else None
    return [k for k in required if isinstance(k, str)] if isinstance(required, list) else []
