"""The plugin contract and its machinery: hookspecs, the Adapter base, Instrumentor, the plugin
manager and ``wrap()``; and the pieces plugins share, since they never import each other (``tasks``,
``loop_pool``, ``langchain_callbacks``, ``langchain_hooks``: each imports its framework only when called).
Above ``capture``, below everything that runs rollouts.
"""
