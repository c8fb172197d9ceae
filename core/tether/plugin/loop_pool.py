"""Objects made per running event loop, for plugins whose framework keeps a model client across runs.

An ``openai.AsyncOpenAI`` keeps a pool of HTTP connections bound to the event loop that first used it.
``Trainer.dev``, ``evaluate`` and ``fit`` each run their own event loop, so a client reused across them would
hand a second loop connections of a closed one, and every model call would fail with "Event loop is closed".
``LoopPool`` gives each running loop its own objects (``get(owner, make)``: one per owner object and loop,
made on first use) and closes those made for the running loop when the plugin is done with it
(``close_for_running_loop``: the adapters call it from ``uninstrument``, which the runner calls as it stops).
The ``autogen`` plugin keeps per-loop copies of the user's model clients in one, the ``openai_agents`` plugin
its ``AsyncOpenAI`` client.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

#: ``close(value)``: what to await when the value's loop is done (closing its HTTP client)
Closer = Callable[[Any], Awaitable[Any]]


class LoopPool:
    """Per-event-loop objects, one per owner (matched by identity), each closed with its loop's turn."""

    def __init__(self) -> None:
        # loop -> {id(owner): (owner, value, closer)}; the owner is kept so that its id is not reused
        self._made: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[int, tuple[Any, Any, Closer | None]]
        ] = weakref.WeakKeyDictionary()
        self._closing: set[asyncio.Task[Any]] = set()

    def get(
        self, owner: object, make: Callable[[], _T], close: Callable[[_T], Awaitable[Any]] | None = None
    ) -> _T:
        """The running loop's object for ``owner``: ``make()`` the first time (in this loop), with ``close`` to
        await on it when the loop is done. Must be called in a running event loop."""
        made = self._made.setdefault(asyncio.get_running_loop(), {})
        found = made.get(id(owner))
        if found is not None and found[0] is owner:
            value: _T = found[1]
            return value
        value = make()
        made[id(owner)] = (owner, value, close)
        return value

    def close_for_running_loop(self) -> None:
        """Close what was made for the running loop (scheduled on it) and forget it; a no-op outside a loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for _, value, close in (self._made.pop(loop, None) or {}).values():
            if close is not None:
                task = loop.create_task(_await(close(value)))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    def __len__(self) -> int:
        """How many objects are held, over all loops."""
        return sum(len(made) for made in self._made.values())


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable
