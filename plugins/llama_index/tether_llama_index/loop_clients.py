"""Per-event-loop ``AsyncOpenAI`` clients for LlamaIndex's OpenAI LLM, inside rollouts.

``llama_index.llms.openai.OpenAI`` builds its ``AsyncOpenAI`` on first use and keeps it (``reuse_client=True``,
the default); its pool of HTTP connections binds to the event loop that first used it, and ``Trainer.dev``,
``evaluate`` and ``fit`` each run their own loop, so an LLM built at import time can fail the second loop with
"Event loop is closed" (its pooled connections belong to the closed loop). While the adapter is instrumented,
``OpenAI._get_aclient`` inside a rollout (``tether.capture.context.current_scope`` set, in a running loop) returns
a client made for the running loop (``tether.plugin.loop_pool``: one per LLM and loop, closed when the runner
stops): a copy of the LLM's own client with a new HTTP client when it has one, else one built from the LLM's
settings as LlamaIndex builds it. The LLM's own client is left as it was. Elsewhere the method is unchanged.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from tether.capture.context import current_scope
from tether.plugin.loop_pool import LoopPool


def make_wrapper(original: Callable[..., Any], pool: LoopPool) -> Callable[..., Any]:
    @functools.wraps(original)
    def _get_aclient(self: Any) -> Any:
        if current_scope.get() is None or not getattr(self, "reuse_client", True):
            return original(self)  # outside rollouts, or a new client per call anyway
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return original(self)
        return pool.get(self, lambda: _make(self), _close)

    return _get_aclient


def _make(llm: Any) -> Any:
    import openai

    own = getattr(llm, "_aclient", None)
    if own is not None:
        return own.copy(http_client=openai.DefaultAsyncHttpxClient())
    return openai.AsyncOpenAI(**llm._get_credential_kwargs(is_async=True))


async def _close(client: Any) -> None:
    await client.close()
