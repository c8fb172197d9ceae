"""What the ``langchain`` and ``langgraph`` plugins share: LangChain's callbacks as tether spans and the hook that
attaches a handler to every LangChain run. Not a plugin (no entry point, no hooks, no extra of its own): a base
both plugins build on, shipped with each of their extras, so that neither imports the other and the core holds
no LangChain code.

- ``tether_langchain_base.callbacks``: ``CallbackCapture``, the mixin in front of LangChain's
  ``BaseCallbackHandler`` that turns model and tool calls into spans (the plugin only names them).
- ``tether_langchain_base.hooks``: ``ConfigureHook`` (the handler's registration on every LangChain run) and
  ``no_langsmith_tracing`` (a ``rollout_context`` keeping LangSmith from uploading rollouts).

Importing this package does not import LangChain: each module imports it only when called.
"""
