"""One reference-counted holder for a process-wide patch that several owners may hold at once.

Several parts of tether patch the same process-wide thing (the openai SDK's request builder, the Agents SDK's
trace processors): the adapter while instrumented, the runner around each rollout, an adapter around each
run, from many threads and tasks. ``SharedPatch`` installs on the first ``acquire()``, undoes on the last
``release()``, and serialises both, so however the holds nest or interleave the patch is put in once and
taken out exactly once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

_T = TypeVar("_T")


class SharedPatch(Generic[_T]):
    """A patch held by reference count: ``install()`` runs on the first ``acquire()`` (its return value is
    what every ``acquire()`` returns while held), ``uninstall(value)`` on the last ``release()``. Thread-safe;
    both callbacks run under the holder's lock. If ``install`` raises, nothing is held."""

    def __init__(self, name: str, install: Callable[[], _T], uninstall: Callable[[_T], None]) -> None:
        self.name = name
        self._install = install
        self._uninstall = uninstall
        self._lock = threading.Lock()
        self._count = 0
        self._value: _T | None = None

    @property
    def count(self) -> int:
        """How many holds are outstanding."""
        return self._count

    @property
    def value(self) -> _T | None:
        """What ``install`` returned, while held; None when not held."""
        return self._value if self._count else None

    def acquire(self) -> _T:
        """Install the patch (first hold) or add a hold to it; returns what ``install`` returned."""
        with self._lock:
            if self._count == 0:
                self._value = self._install()
            self._count += 1
            return cast(_T, self._value)  # set by install() while held

    def release(self) -> None:
        """Drop one hold; the last one uninstalls the patch. A no-op when not held."""
        with self._lock:
            if self._count == 0:
                return
            self._count -= 1
            if self._count:
                return
            value, self._value = self._value, None
            self._uninstall(cast(_T, value))

    @contextlib.contextmanager
    def held(self) -> Iterator[_T]:
        """Hold the patch for a ``with`` block."""
        value = self.acquire()
        try:
            yield value
        finally:
            self.release()

    def __repr__(self) -> str:
        return f"<SharedPatch {self.name!r} count={self._count}>"
