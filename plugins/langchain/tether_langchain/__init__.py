"""tether's ``langchain`` plugin: trains LangChain runnables unchanged (``pip install "tether[langchain]"``).

``LangChainAdapter`` runs any LangChain ``Runnable`` — an LCEL chain, a ``langchain_classic`` ``AgentExecutor``,
a ``langchain.agents.create_agent`` graph — on each task and captures its model and tool calls through a
global LangChain callback handler, naming each call after the agent run that made it (``tether_langchain.names``:
the wrapped runnable, or an inner one with a name of its own). Model calls reach tether's proxy through
tether's endpoint redirect. LangSmith tracing is switched off inside rollouts. Graphs built with LangGraph's
``StateGraph`` are the ``langgraph`` plugin's. Importing this module does not import LangChain.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook, rollout_hook
from tether_langchain.adapter import LangChainAdapter, is_create_agent_graph, task_input
from tether_langchain_base.hooks import no_langsmith_tracing

EXTRA = "langchain"
REQUIRES = ("langchain_core", "langchain_openai")
#: where the agents it runs come from (for the install hint when REQUIRES are missing)
AGENT_MODULES = ("langchain_classic", "langchain")

__all__ = [
    "AGENT_MODULES",
    "EXTRA",
    "REQUIRES",
    "LangChainAdapter",
    "is_create_agent_graph",
    "register_adapters",
    "rollout_context",
    "task_input",
]

register_adapters = adapters_hook(LangChainAdapter)
#: keep LangSmith from uploading traces of rollouts
rollout_context = rollout_hook(no_langsmith_tracing)
