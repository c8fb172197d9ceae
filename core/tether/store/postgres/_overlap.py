"""Work done here while the PostgreSQL server answers a statement: its round trip and local work overlap.

A read the span cache serves is one round trip (the attempt's ``next_seq``: which spans exist) plus the copy
of the cached spans that SQLite's read makes too (``tether.store.postgres._spans``). Done one after the other, the
read costs the sum; but once the statement is on the wire the server works on it in its own process (on
another core when one is free) while this one would only wait. ``Started`` runs an asyncpg call up to its
first wait, by which time asyncpg has written the statement to the socket; the caller copies the spans, then
awaits the rest of the call, which only reads the answer. The copy is speculative: the caller keeps it only
if the answer says the cache held every span.

It pays only when the server's process gets a core of its own at once. On a machine with none free it waits
for one (most likely on the reader's core, where the send's wakeup put it, until the reader has copied and
blocks, and then behind other runnable processes): measured on two oversubscribed cores, the overlapped read
went from as fast as check-then-copy to several times slower. So ``ReadOrder`` keeps whichever
order has been quicker lately: most reads take it, and ``PROBE`` in every ``PROBE_EVERY`` take the other,
which is kept instead when the median wall time of those is clearly below that of the kept order's latest
``PROBE`` reads (wall times on a loaded machine scatter widely: a margin, so that it does not flap on noise).

``Started`` drives the call as ``await`` would (``yield from`` by hand): every value the call yields goes to
the task running it, and whatever the task sends or throws in (a result, a cancellation) goes back, so
cancelling the caller cancels the call as it would have.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["PROBE", "PROBE_EVERY", "SWITCH_BELOW", "ReadOrder", "Started"]

PROBE_EVERY = 128  # reads; the last PROBE of each such run of reads take the other order
PROBE = 16
SWITCH_BELOW = 0.9  # the other order is taken when its median is below this fraction of the kept order's

_T = TypeVar("_T")


class Started(Generic[_T]):
    """``coro`` run now up to its first suspension; ``await`` this (once) for the rest and its result."""

    __slots__ = ("_coro", "_done", "_pending", "_result")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self._coro = coro
        self._done = False
        self._pending: Any = None
        try:
            self._pending = coro.send(None)
        except StopIteration as stop:  # finished without waiting (an exception propagates to the caller)
            self._done, self._result = True, stop.value

    def __await__(self) -> Generator[Any, Any, _T]:
        if self._done:
            return self._result  # type: ignore[no-any-return]
        coro, pending = self._coro, self._pending
        self._pending = None
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation (or any exception) thrown into the awaiting task
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]


class ReadOrder:
    """Whether a cached read copies while the server answers (``overlap``) or after, by what was quicker lately:
    ``overlap_next()`` before a read, ``record(overlapped, seconds)`` after it. Its state is a hint shared by
    whatever reads through one store; races between threads only blur the choice."""

    def __init__(self) -> None:
        self.overlap = True
        self._reads = 0
        self._times: dict[bool, deque[float]] = {True: deque(maxlen=PROBE), False: deque(maxlen=PROBE)}

    def overlap_next(self) -> bool:
        probing = self._reads % PROBE_EVERY >= PROBE_EVERY - PROBE
        self._reads += 1
        return self.overlap != probing

    def record(self, overlapped: bool, seconds: float) -> None:
        self._times[overlapped].append(seconds)
        if self._reads % PROBE_EVERY == 0:  # a probe just ended: keep the quicker order
            kept, other = self._times[self.overlap], self._times[not self.overlap]
            if len(kept) == PROBE and len(other) == PROBE:
                if statistics.median(other) < SWITCH_BELOW * statistics.median(kept):
                    self.overlap = not self.overlap
