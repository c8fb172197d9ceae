"""Per-event-loop copies of the OpenAI model clients an AutoGen agent uses.

An AutoGen model client is usually built once, at import time; its ``openai.AsyncOpenAI`` keeps a pool of
HTTP connections bound to the event loop that first used it, and ``Trainer.dev``, ``evaluate`` and ``fit`` each
run their own event loop (``tether.plugin.loop_pool``). Rollout copies of an agent therefore get, per running
event loop, a copy of each OpenAI model client (same settings, same usage counters) whose ``AsyncOpenAI`` has
an HTTP client made in that loop. The user's own client and its pool are never used by rollouts. The HTTP
clients made for a loop are closed by ``close_for_running_loop`` (the adapter calls it when the runner stops).
"""

from __future__ import annotations

from typing import Any

from tether.plugin.loop_pool import LoopPool


class LoopClients:
    def __init__(self) -> None:
        self._pool = LoopPool()

    def model_client(self, client: Any) -> Any:
        """The running loop's copy of ``client``, or ``client`` itself when it is not an OpenAI client."""
        async_openai = getattr(client, "_client", None)
        if async_openai is None or not _is_async_openai(async_openai):
            return client
        return self._pool.get(client, lambda: _copy(client, async_openai), _close_http)

    def close_for_running_loop(self) -> None:
        """Close the HTTP clients made for the running loop (scheduled on it; a no-op outside a loop)."""
        self._pool.close_for_running_loop()


def _copy(client: Any, async_openai: Any) -> Any:
    import openai

    clone = object.__new__(type(client))  # not copy.copy: its __setstate__ builds a new client from config
    clone.__dict__.update(client.__dict__)
    clone._client = async_openai.copy(http_client=openai.DefaultAsyncHttpxClient())
    return clone


async def _close_http(clone: Any) -> None:
    await clone._client.close()  # the copy's AsyncOpenAI: closes the HTTP client made for this loop


def _is_async_openai(obj: Any) -> bool:
    if obj is None:
        return False
    try:
        import openai
    except ImportError:
        return False
    return isinstance(obj, openai.AsyncOpenAI)
