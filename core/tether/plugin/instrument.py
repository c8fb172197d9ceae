"""What every adapter and tracer shares: the span sink it captures into, idempotent instrumentation, and
``Patch``, the one way tether replaces a framework's function.

``Instrumentor`` owns the sink and the bookkeeping, so a subclass writes only what is specific to its
framework: ``_instrument(sink)`` (install handlers, patches, hooks), ``_uninstrument()`` (undo exactly that),
and, when it handed the sink to a helper object, ``_repoint(sink)``. A patch applied with ``self._patch(...)``
in ``_instrument`` needs no undoing: the instrumentor undoes it, last first, after ``_uninstrument`` (and when
``_instrument`` fails). The rules, the same for every adapter:

- ``instrument(sink)`` the first time stores the sink and calls ``_instrument``; again with the same sink it
  changes nothing; with another sink it re-points: spans go to the new sink and nothing is installed twice
  (``_repoint``). A runner instruments once per run; re-pointing lets a second runner take over an adapter
  the first one left instrumented without doubling its handlers.
- ``uninstrument()`` calls ``_uninstrument`` exactly once per instrumentation and forgets the sink; it is a
  no-op when not instrumented.

``Patch`` (defined with the other patch helpers in ``tether.capture.patching``, re-exported here for plugin
authors) replaces one attribute of a class, module or object and puts the original back on ``undo()`` only if
the attribute is still its replacement: if something patched over it meanwhile, that is left in place
(``undo`` returns False and logs it) rather than torn out from under whoever did.

This module is part of the plugin contract: it imports nothing of tether but the span sink's protocol and the
patch helpers of ``tether.capture``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tether.capture.context import SpanSink as SpanSink
from tether.capture.patching import PATCH_TAG as PATCH_TAG
from tether.capture.patching import Patch as Patch

log = logging.getLogger(__name__)


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
        state.pop("_patches", None)  # the copy applies its own
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
                self._undo_patches()
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
                self._undo_patches()
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

    def _patch(self, *patches: Patch) -> None:
        """Apply ``patches`` (for ``_instrument``); each applied one is undone, last first, after
        ``_uninstrument`` or when ``_instrument`` raises."""
        applied: list[Patch] = self.__dict__.setdefault("_patches", [])
        for patch in patches:
            patch.apply()
            applied.append(patch)

    def _undo_patches(self) -> None:
        applied: list[Patch] = self.__dict__.get("_patches") or []
        while applied:
            applied.pop().undo()

    def _instrumentor_lock(self) -> threading.RLock:
        # subclasses that do not call Instrumentor.__init__ (they predate it) still get a lock, made once
        lock: threading.RLock | None = self.__dict__.get("_instrument_lock")
        if lock is None:
            with _LOCK_OF_LOCKS:
                lock = self.__dict__.setdefault("_instrument_lock", threading.RLock())
        return lock


_LOCK_OF_LOCKS = threading.Lock()
