"""The PostgreSQL store's pool of asyncpg connections for one event loop (``tether.store.postgres._conn``).

asyncpg's own pool cost about 60 µs a call on top of the query (a task per release for ``asyncio.shield``, a
timeout context, an inactivity timer cancelled and re-armed, a proxy object): as much as the loopback round
trip of a small read. And a caller that finds every connection busy opens a new one and waits for it; a new
connection is slow to become quick (measured on the 2-core development machine: 5-10 ms to connect, 15-40 ms
for asyncpg to introspect the array types of ``tether_add_spans``' arguments, 3-9 ms to compile that PL/pgSQL
function), so sixteen workers starting at once waited 100-200 ms each: the p99 of the 16-worker lifecycle
benchmark.

This pool hands out the most recently used idle connection. When every connection is busy it opens one more
(at most ``max_size``, one at a time) in the background, readied by ``connect()`` (the store prepares its
statements there), while the caller takes whichever comes first: a connection given back or the new one.
Only a caller that finds no connection open at all opens one itself (and gets its error, if the server is
unreachable). A connection idle for ``IDLE_CLOSE_S`` is closed (the last one stays).

A connection comes back reusable only from a call that ended cleanly (or with an error the server sent, which
leaves it usable); one that is closed, still inside a transaction, or back from a cancelled or failed call is
terminated. Nothing is reset between callers: the store leaves no session state behind.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["IDLE_CLOSE_S", "Pool"]

IDLE_CLOSE_S = 300.0  # an idle connection beyond the last is closed after this long (asyncpg's default too)


class Pool:
    """At most ``max_size`` connections made by ``connect()``; ``acquire`` one, then always ``release`` it."""

    def __init__(
        self, connect: Callable[[], Awaitable[Any]], max_size: int, closed_error: Callable[[], Exception]
    ) -> None:
        self._connect = connect
        self.max_size = max(1, max_size)
        self._closed_error = closed_error
        self._idle: list[tuple[Any, float]] = []  # (connection, idle since), the most recently used last
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._opener: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def size(self) -> int:
        """Connections open or being opened."""
        return self._open

    async def acquire(self) -> Any:
        """An idle connection, else the first of: one given back, one opened for this wait."""
        while True:
            if self.closed:
                raise self._closed_error()
            while self._idle:
                conn, _ = self._idle.pop()
                if not conn.is_closed():
                    return conn
                self._open -= 1
            if self._open == 0:  # nothing to wait for: open one here, its error is this caller's
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._hand(None)
                    raise
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._grow()
            try:
                conn = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():  # handed over as this task was cancelled
                    given = waiter.result()
                    if given is None:
                        self._hand(None)
                    else:
                        self.release(given)
                raise
            if conn is not None:
                return conn
            # None: a connection was dropped; go round (open one if none is left)

    def release(self, conn: Any, *, reuse: bool = True) -> None:
        """Give ``conn`` back: to the longest waiter, else to the idle stack; terminated instead unless
        ``reuse`` and it is open and outside any transaction."""
        if self.closed or not reuse or conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            self._open -= 1
            self._hand(None)
            return
        self._hand(conn)
        self._close_idle()

    def _hand(self, conn: Any) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is not None:
            self._idle.append((conn, time.monotonic()))

    def _grow(self) -> None:
        """Open one more connection in the background while callers wait and there is room."""
        if self._opener is None and self._open < self.max_size and any(not w.done() for w in self._waiters):
            self._open += 1
            self._opener = asyncio.get_running_loop().create_task(self._open_one())

    async def _open_one(self) -> None:
        try:
            conn = await self._connect()
        except Exception:  # (the server may be gone: the waiters get the busy connections as they end; if none
            self._open -= 1  # is left, a woken waiter opens one itself and gets the error)
            self._opener = None
            if self._open == 0:
                self._hand(None)
            return
        self._opener = None
        if self.closed:
            conn.terminate()
            self._open -= 1
            return
        self._hand(conn)
        self._grow()

    def _close_idle(self) -> None:
        """Close the least recently used idle connection if it sat idle too long (keeping one open)."""
        if len(self._idle) > 1 and time.monotonic() - self._idle[0][1] > IDLE_CLOSE_S:
            conn, _ = self._idle.pop(0)
            conn.terminate()
            self._open -= 1

    async def close(self, graceful: bool) -> None:
        """Close the idle connections (``terminate`` them unless ``graceful``: the pool of another loop); those
        in use are terminated when given back; waiters get the closed error."""
        self.closed = True
        if self._opener is not None:
            self._opener.cancel()
            self._opener = None
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            self._open -= 1
            if graceful and not conn.is_closed():
                try:
                    await conn.close(timeout=5)
                except Exception:
                    conn.terminate()
            else:
                conn.terminate()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._closed_error())
