"""Capturing a rollout: the context variables that scope a call to its rollout and sub-agent, the
endpoint redirect, span sinks, ``emit_*`` and span batching. Imports only the ground floor.
"""
