"""The patch helpers tether uses on frameworks' code, in one place: ``Patch`` replaces one attribute and puts the
original back exactly; ``SharedPatch`` holds a process-wide patch by reference count; ``SeamMissing`` is raised,
naming the installed version, when a private seam tether patches or reads has moved in a new release, and
``Seam`` checks such private parts where they are used (attributes, a function's parameters) and raises it.

Several parts of tether patch the same process-wide thing (the openai SDK's request builder, the Agents SDK's
trace processors): the adapter while instrumented, the runner around each rollout, an adapter around each
run, from many threads and tasks. ``SharedPatch`` installs on the first ``acquire()``, undoes on the last
``release()``, and serialises both, so however the holds nest or interleave the patch is put in once and
taken out exactly once.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

_T = TypeVar("_T")

log = logging.getLogger(__name__)

#: the attribute set on every replacement a ``Patch`` installs (``Patch.is_patch`` reads it)
PATCH_TAG = "__tether_patch__"


class SeamMissing(RuntimeError):
    """A framework no longer has the private function or field tether patches or reads (a new release moved
    it); the message names the installed version and what to do."""


class Seam:
    """The private parts of one installed framework that a tether module relies on: ``require`` and
    ``require_parameters`` check them where they are used, and raise ``SeamMissing`` naming the framework's
    installed version, what moved, the tether module to update and the version pin that avoids it::

        _SEAM = Seam("autogen-agentchat", "tether_autogen.isolate")
        _SEAM.require(team, "_participants", "_max_turns")  # SeamMissing if a release renamed one
    """

    def __init__(self, distribution: str, used_by: str) -> None:
        self.distribution = distribution
        self.used_by = used_by

    @property
    def version(self) -> str:
        """The installed version of the framework's distribution ("?" when it cannot be read)."""
        try:
            return importlib.metadata.version(self.distribution)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            return "?"

    def missing(self, what: str) -> SeamMissing:
        """The error for a seam that moved: ``what`` says which part and how it differs."""
        return SeamMissing(
            f"{self.distribution} {self.version}: {what}; {self.used_by} needs updating for this release, or "
            f"pin {self.distribution} to a version it supports"
        )

    def require(self, owner: Any, *names: str) -> None:
        """``SeamMissing`` unless ``owner`` (an object, class or module) has every attribute in ``names``."""
        absent = [name for name in names if not hasattr(owner, name)]
        if absent:
            raise self.missing(f"{_describe(owner)} has no {', '.join(absent)}")

    def require_parameters(self, func: Any, *names: str) -> None:
        """``SeamMissing`` unless ``func`` takes every parameter in ``names`` (by keyword)."""
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError) as exc:
            raise self.missing(f"{_describe(func)} has no readable signature ({exc})") from exc
        absent = [name for name in names if name not in params]
        if absent:
            raise self.missing(f"{_describe(func)}{inspect.signature(func)} takes no {', '.join(absent)}")

    def __repr__(self) -> str:
        return f"<Seam {self.distribution} for {self.used_by}>"


def _describe(owner: Any) -> str:
    if isinstance(owner, type) or (callable(owner) and hasattr(owner, "__qualname__")):
        return f"{getattr(owner, '__module__', '?')}.{owner.__qualname__}"
    name = getattr(owner, "__name__", None)  # a module
    return name if isinstance(name, str) else f"a {type(owner).__qualname__}"


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
