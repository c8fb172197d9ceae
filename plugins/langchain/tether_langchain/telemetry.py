"""Switches LangSmith tracing off inside a rollout.

LangChain uploads runs to LangSmith when ``LANGSMITH_TRACING`` / ``LANGCHAIN_TRACING_V2`` is set or a
``tracing_v2_enabled()`` block is active. Inside a rollout that would send every training call home, so the
rollout context sets LangSmith's tracing context to ``enabled=False`` (which wins over the environment) and
clears LangChain's active-tracer context variable, for this rollout's context only. Nothing is imported when
the process never imported LangChain or LangSmith.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def no_langsmith_tracing() -> AsyncIterator[None]:
    if "langsmith" not in sys.modules and "langchain_core" not in sys.modules:
        yield
        return
    from langsmith.run_helpers import tracing_context

    with contextlib.ExitStack() as stack:
        stack.enter_context(tracing_context(enabled=False, parent=False))
        tracers = sys.modules.get("langchain_core.tracers.context")
        if tracers is not None:
            var = tracers.tracing_v2_callback_var
            token = var.set(None)
            stack.callback(var.reset, token)
        yield
