"""What every adapter and tracer shares: the span sink it captures into, idempotent instrumentation, and
``Patch``, the one way tether replaces a framework's function.

``Instrumentor`` owns the sink and the bookkeeping, so a subclass writes only what is specific to its
framework: ``_instrument(sink)`` (install handlers, patches, hooks), ``_uninstrument()`` (undo exactly that),
and, when it handed the sink to a helper object, ``_repoint(sink)``. The rules, the same for every adapter:

- ``instrument(sink)`` the first time stores the sink and calls ``_instrument``; again with the same sink it
  changes nothing; with another sink it re-points: spans go to the new sink and nothing is installed twice
  (``_repoint``). A runner instruments once per run; re-pointing lets a second runner take over an adapter
  the first one left instrumented without doubling its handlers.
- ``uninstrument()`` calls ``_uninstrument`` exactly once per instrumentation and forgets the sink; it is a
  no-op when not instrumented.

``Patch`` replaces one attribute of a class, module or object and puts the original back on ``undo()`` only
if the attribute is still its replacement: if something patched over it meanwhile, that is left in place
(``undo`` returns False and logs it) rather than torn out from under whoever did.

This module is part of the plugin contract: it imports nothing of tether but the span types.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from tether.capture.context import SpanSink as SpanSink

log = logging.getLogger(__name__)

#: the attribute set on every replacement a ``Patch`` installs (``Patch.is_patch`` reads it)
PATCH_TAG = "__tether_patch__"


class Instrumentor:
    """Owns a sink and idempotent ``instrument`` / ``uninstrument``; subclasses implement ``_instrument`` and
    ``_uninstrument`` (both no-ops here: an adapter whose calls the proxy alone captures needs neither)."""

    def __init__(self) -> None:
        self._sink: SpanSink | None = None
        self._instrument_lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to run in another process: ``tether.RayRunners``) without its lock, and uninstrumented:
        the copy is instrumented where it runs."""
        state = dict(self.__dict__)
        state.pop("_instrument_lock", None)  # made again on first use
        state["_sink"] = None
        return state

    @property
    def sink(self) -> SpanSink | None:
        """The sink captured calls go to; None when not instrumented."""
        return getattr(self, "_sink", None)

    @property
    def instrumented(self) -> bool:
        return self.sink is not None

    def instrument(self, sink: SpanSink) -> None:
        """Start sending captured calls to ``sink``. Again with the same sink: nothing changes; with another
        sink: captured calls go there from now on, nothing is installed twice."""
        with self._instrumentor_lock():
            current = self.sink
            if current is sink:
                return
            self._sink = sink
            if current is not None:
                self._repoint(sink)
                return
            try:
                self._instrument(sink)
            except BaseException:
                self._sink = None
                raise

    def uninstrument(self) -> None:
        """Undo exactly what ``instrument`` did; a no-op when not instrumented."""
        with self._instrumentor_lock():
            if self.sink is None:
                return
            try:
                self._uninstrument()
            finally:
                self._sink = None

    # -- for subclasses -----------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        """Install what captures calls into ``sink`` (``self.sink`` is already ``sink``). If it raises, it
        must leave nothing installed: the instrumentor stays uninstrumented."""

    def _uninstrument(self) -> None:
        """Remove exactly what ``_instrument`` installed (``self.sink`` is still set while this runs)."""

    def _repoint(self, sink: SpanSink) -> None:
        """Send captured calls to ``sink`` from now on (``self.sink`` already is ``sink``): override when
        ``_instrument`` handed the sink to an object that keeps its own reference."""

    def _instrumentor_lock(self) -> threading.RLock:
        # subclasses that do not call Instrumentor.__init__ (they predate it) still get a lock, made once
        lock: threading.RLock | None = self.__dict__.get("_instrument_lock")
        if lock is None:
            with _LOCK_OF_LOCKS:
                lock = self.__dict__.setdefault("_instrument_lock", threading.RLock())
        return lock


_LOCK_OF_LOCKS = threading.Lock()


class Patch:
    """Replaces ``owner.<name>`` by ``wrap(original)`` while applied; reusable (apply, undo, apply …).

    ``original`` is the attribute as ``owner`` itself stores it (for a class, the plain function in its
    ``__dict__``, not a bound method), or the inherited value when ``owner`` does not define it; ``undo``
    then deletes the replacement so that the inherited value shows through again. The replacement is tagged
    with ``PATCH_TAG`` (see ``is_patch``).
    """

    def __init__(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        self.owner = owner
        self.name = name
        self._wrap = wrap
        self._lock = threading.Lock()
        self._replacement: Any = None
        self._original: Any = None
        self._owned = False  # the original was in owner's own namespace (restore by setting, not deleting)
        self._applied = False

    @property
    def applied(self) -> bool:
        return self._applied

    @property
    def original(self) -> Any:
        """The value replaced by the current application (None when not applied)."""
        return self._original if self._applied else None

    def apply(self) -> None:
        """Install the replacement (a no-op when this patch is already applied). ``AttributeError`` if
        ``owner`` has no such attribute."""
        with self._lock:
            if self._applied:
                return
            owned, original = _own_value(self.owner, self.name)
            replacement = self._wrap(original)
            try:
                setattr(replacement, PATCH_TAG, True)
            except (AttributeError, TypeError):  # a builtin or slotted object: identity still tells ours
                pass
            setattr(self.owner, self.name, replacement)
            self._owned, self._original, self._replacement = owned, original, replacement
            self._applied = True

    def undo(self) -> bool:
        """Put the original back if the attribute is still this patch's replacement. Returns False (and logs)
        when something else replaced it meanwhile: that is left in place. True otherwise, including when the
        patch was not applied."""
        with self._lock:
            if not self._applied:
                return True
            _, current = _own_value(self.owner, self.name, default=None)
            ours = current is self._replacement
            if ours:
                if self._owned:
                    setattr(self.owner, self.name, self._original)
                else:
                    delattr(self.owner, self.name)
            else:
                log.info(
                    "tether left %s.%s in place: it was replaced after tether patched it, so tether's wrapper "
                    "stays inside the newer one",
                    getattr(self.owner, "__qualname__", type(self.owner).__qualname__),
                    self.name,
                )
            self._applied = False
            self._original = self._replacement = None
            return ours

    @staticmethod
    def is_patch(value: Any) -> bool:
        """True if ``value`` is a replacement some ``Patch`` installed."""
        return getattr(value, PATCH_TAG, False) is True

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__qualname__", type(self.owner).__qualname__)
        return f"<Patch {owner}.{self.name} {'applied' if self._applied else 'not applied'}>"


_MISSING: Any = object()


def _own_value(owner: Any, name: str, default: Any = _MISSING) -> tuple[bool, Any]:
    """(whether ``owner`` stores ``name`` itself, the value): from its own namespace when it has the
    attribute there, else as inherited (``getattr``)."""
    namespace = getattr(owner, "__dict__", None)
    if namespace is not None and name in namespace:
        return True, namespace[name]
    if default is _MISSING:
        return namespace is None, getattr(owner, name)
    return namespace is None, getattr(owner, name, default)
