"""``Slots``: at most ``limit`` holders at once, taken without an ``await`` when one is free.

An ``asyncio.Semaphore`` behind ``asyncio.timeout`` costs a timer, a context manager and a scan of its
waiters on every call, even when nothing waits; the proxy bounds every model call this way (twice: its own
calls in flight and the upstream connection pool). ``try_take`` is the free case in a few bytecodes; only a
caller that must wait pays for a future (and its timeout). Slots are handed over first come, first served.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """``limit`` slots for one event loop: ``try_take`` or ``await take()``, then ``give`` back exactly once."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        """Take a slot if one is free and nobody waits for one (no overtaking); whether it was taken."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting for one in turn. A caller cancelled while waiting holds none."""
        if self.try_take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # handed a slot, then cancelled: pass it on
                self.give()
            elif waiter in self._waiters:  # (``give`` may have dropped it already, cancelled)
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Return a slot: to the first caller still waiting, else to the free ones."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
