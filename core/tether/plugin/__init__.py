"""The plugin contract and its machinery: hookspecs, the Adapter base, Instrumentor, the plugin
manager and ``wrap()``. Above ``capture``, below everything that runs rollouts.
"""
