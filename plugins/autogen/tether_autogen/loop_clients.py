"""Per-event-loop copies of the OpenAI model clients an AutoGen agent uses.

An AutoGen model client is usually built once, at import time; its ``openai.AsyncOpenAI`` keeps a pool of
HTTP connections bound to the event loop that first used it. ``Trainer.dev``, ``evaluate`` and ``fit`` each
run their own event loop, so a second call would reuse connections of a closed loop and every model call
would fail with "Event loop is closed". Rollout copies of an agent therefore get, per running event loop, a
copy of each OpenAI model client (same settings, same usage counters) whose ``AsyncOpenAI`` has an HTTP
client made in that loop. The user's own client and its pool are never used by rollouts. The HTTP clients
made for a loop are closed by ``close_for_running_loop`` (the adapter calls it when the runner stops).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any


class LoopClients:
    def __init__(self) -> None:
        # loop -> {id(original model client): (original, copy)}, and the HTTP clients made in that loop
        self._copies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, tuple[Any, Any]]] = (
            weakref.WeakKeyDictionary()
        )
        self._http: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = weakref.WeakKeyDictionary()
        self._closing: set[asyncio.Task[Any]] = set()

    def model_client(self, client: Any) -> Any:
        """The running loop's copy of ``client``, or ``client`` itself when it is not an OpenAI client."""
        async_openai = getattr(client, "_client", None)
        if async_openai is None or not _is_async_openai(async_openai):
            return client
        loop = asyncio.get_running_loop()
        copies = self._copies.setdefault(loop, {})
        found = copies.get(id(client))
        if found is not None and found[0] is client:
            return found[1]
        import openai

        http = openai.DefaultAsyncHttpxClient()
        self._http.setdefault(loop, []).append(http)
        clone = object.__new__(type(client))  # not copy.copy: its __setstate__ builds a new client from config
        clone.__dict__.update(client.__dict__)
        clone._client = async_openai.copy(http_client=http)
        copies[id(client)] = (client, clone)
        return clone

    def close_for_running_loop(self) -> None:
        """Close the HTTP clients made for the running loop (scheduled on it; a no-op outside a loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._copies.pop(loop, None)
        for http in self._http.pop(loop, []):
            task = loop.create_task(http.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)


def _is_async_openai(obj: Any) -> bool:
    if obj is None:
        return False
    try:
        import openai
    except ImportError:
        return False
    return isinstance(obj, openai.AsyncOpenAI)
