"""tether's ``openai`` plugin: the per-request endpoint redirect every framework plugin builds on, and the
adapter for plain functions that call the OpenAI client (``pip install "tether[openai]"``).

Importing this module does not import ``openai``: the SDK is imported when the redirect is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from tether.adapters import Adapter
from tether.hookspecs import hookimpl
from tether_openai import redirect
from tether_openai.adapter import OpenAIFunctionAdapter

EXTRA = "openai"
REQUIRES = ("openai",)

__all__ = ["EXTRA", "REQUIRES", "OpenAIFunctionAdapter", "redirect", "register_adapters", "rollout_context"]


@hookimpl
def register_adapters(register: Callable[[Adapter], None]) -> None:
    register(OpenAIFunctionAdapter())


@contextlib.asynccontextmanager
async def _redirect_held() -> AsyncIterator[None]:
    redirect.install()
    try:
        yield
    finally:
        redirect.uninstall()


@hookimpl
def rollout_context(rollout: Any) -> AbstractAsyncContextManager[Any]:
    """Hold the endpoint redirect for the rollout, whatever the adapter: every framework's model client is an
    openai SDK client, and its requests must reach the rollout's proxy URL."""
    return _redirect_held()
