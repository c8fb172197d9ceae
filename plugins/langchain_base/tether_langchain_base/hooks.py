"""How the ``langchain`` and ``langgraph`` plugins attach their callback handler to every LangChain run, and keep
LangSmith from uploading rollouts: the plumbing both share, here so that neither imports the other.

``ConfigureHook`` registers a handler with ``langchain_core.tracers.context.register_configure_hook``: LangChain
adds the handler of every registered context variable whose value is not None to each callback manager it
configures, and the hook's variable *defaults* to the handler, so it is attached to every run in the process,
whatever the context. LangChain has no public way to unregister a hook, so ``remove`` takes the entry out of
LangChain's private hook list (``_configure_hooks``); should a release move that list, the hook stays
registered but inert (the plugin detaches its handler, which then drops every event) and is reused, not
registered twice, by the next ``attach``.

``no_langsmith_tracing()`` is the plugins' ``rollout_context``: LangChain uploads runs to LangSmith when
``LANGSMITH_TRACING`` / ``LANGCHAIN_TRACING_V2`` is set or a ``tracing_v2_enabled()`` block is active, which
inside a rollout would send every training call home. It sets LangSmith's own tracing context to
``enabled=False`` (which wins over the environment) and clears LangChain's active-tracer context variable, for
the rollout's context only. Nothing is imported when the process never imported LangChain or LangSmith.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

_H = TypeVar("_H")

_HOOKS_MODULE = "langchain_core.tracers.context"


class ConfigureHook(Generic[_H]):
    """One process's registration of a plugin's callback handler (made on the first ``attach``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._clear()

    def _clear(self) -> None:
        self.handler: _H | None = None
        self.var: ContextVar[Any | None] | None = None
        self._entry: tuple[Any, ...] | None = None
        self.registered = False  # our entry is in LangChain's hook list

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (with its adapter, for ``tether.RayRunners``) without this process's handler and hook: the
        copy makes and registers its own when its adapter is instrumented where it runs."""
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self._clear()

    def attach(self, make_handler: Callable[[], _H]) -> _H:
        """The handler (``make_handler()`` the first time), attached to every LangChain run from now on: the
        hook is registered once per process, however often it is attached and removed."""
        from langchain_core.tracers import context as tracers_context

        if self.handler is None or self.var is None:
            self.handler = make_handler()
            self.var = ContextVar(self.name, default=self.handler)
            self._entry = (self.var, True, None, None)  # what register_configure_hook appends
        if not self.registered:
            tracers_context.register_configure_hook(self.var, inheritable=True)
            self.registered = True
        return self.handler

    def remove(self) -> None:
        """Take the hook out of LangChain's list (where that private list still is)."""
        hooks = getattr(sys.modules.get(_HOOKS_MODULE), "_configure_hooks", None)
        if isinstance(hooks, list) and self._entry in hooks:
            hooks.remove(self._entry)
            self.registered = False


@contextlib.asynccontextmanager
async def no_langsmith_tracing() -> AsyncIterator[None]:
    """Switch LangSmith tracing off for the enclosed rollout (see the module docstring)."""
    if "langsmith" not in sys.modules and "langchain_core" not in sys.modules:
        yield
        return
    from langsmith.run_helpers import tracing_context

    with contextlib.ExitStack() as stack:
        stack.enter_context(tracing_context(enabled=False, parent=False))
        tracers = sys.modules.get(_HOOKS_MODULE)
        if tracers is not None:
            var = tracers.tracing_v2_callback_var
            token = var.set(None)
            stack.callback(var.reset, token)
        yield
