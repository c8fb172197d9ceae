"""The hook implementations most plugins write, built in one line of their ``__init__.py``.

``register_adapters = adapters_hook(MyAdapter)`` registers a new ``MyAdapter()`` each time the hook is called
(once per plugin manager); ``rollout_context = rollout_hook(quiet)`` enters ``quiet()`` around every rollout,
whatever the adapter. Each is a ``tether.hookimpl`` like a hand-written one: pluggy finds it by the module
attribute's name, so that name must be the hook's. This module imports nothing from tether but the hook
marker.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from tether.plugin.hookspecs import hookimpl

if TYPE_CHECKING:
    from tether.plugin.adapters import Adapter


def adapters_hook(*adapter_types: type[Adapter]) -> Callable[[Callable[[Adapter], None]], None]:
    """A ``register_adapters`` implementation that registers one new instance of each of ``adapter_types``."""

    @hookimpl
    def register_adapters(register: Callable[[Adapter], None]) -> None:
        for adapter_type in adapter_types:
            register(adapter_type())

    return register_adapters


def rollout_hook(
    context: Callable[[], AbstractAsyncContextManager[Any] | None],
) -> Callable[[Any], AbstractAsyncContextManager[Any] | None]:
    """A ``rollout_context`` implementation that returns ``context()`` for every rollout (``context`` takes no
    argument: what it switches off or on is the same for every rollout)."""

    @hookimpl
    def rollout_context(rollout: Any) -> AbstractAsyncContextManager[Any] | None:
        return context()

    rollout_context.__doc__ = context.__doc__
    return rollout_context
