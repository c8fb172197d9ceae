"""The plugin contract and its machinery: hookspecs (and ``hookimpls``, the usual implementations built in a
line), the Adapter base, Instrumentor, the plugin manager and ``wrap()``; and the pieces plugins share, since
they never import each other (``tasks``, ``loop_pool``: each imports its framework only when called; the
LangChain pieces live in ``plugins/langchain_base``).
Above ``capture``, below everything that runs rollouts.
"""
