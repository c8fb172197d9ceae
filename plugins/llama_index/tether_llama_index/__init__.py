"""tether's ``llama_index`` plugin: trains LlamaIndex agents unchanged — a ``FunctionAgent`` (or ``ReActAgent``,
``CodeActAgent``) or a multi-agent ``AgentWorkflow`` with handoffs (``pip install "tether[llama-index]"``).

``LlamaIndexAdapter`` runs the agent on each task and captures every model call (streamed, as ``FunctionAgent``
makes them) with the name of the agent whose turn it is, and every tool call (the ``handoff`` tool included)
with its arguments and result. Model calls go to tether's proxy through tether's endpoint redirect. Importing
this module does not import LlamaIndex.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_llama_index.adapter import LlamaIndexAdapter, LlamaIndexOutput, summarize

EXTRA = "llama-index"
#: top-level modules (``llama_index`` is a namespace package: the extra's distributions are checked by version)
REQUIRES = ("llama_index", "openai")

__all__ = ["EXTRA", "REQUIRES", "LlamaIndexAdapter", "LlamaIndexOutput", "register_adapters", "summarize"]

register_adapters = adapters_hook(LlamaIndexAdapter)
