"""The whole plugin contract: every hook a tether plugin may implement (pluggy, project name ``tether``).

A plugin is a module or object with functions decorated by ``tether.hookimpl`` whose names match the specs
below. Bundled framework plugins and third-party ones are found through the ``tether`` entry-point group.
The adapter and tracer types are imported for type checking only: this module imports nothing from tether.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from tether.plugin.adapters import Adapter, Tracer
    from tether.types import Rollout

hookspec = pluggy.HookspecMarker("tether")
hookimpl = pluggy.HookimplMarker("tether")


@hookspec
def register_adapters(register: Callable[[Adapter], None]) -> None:
    """Register adapters: call ``register(adapter)`` once for each ``Adapter`` instance this plugin
    provides. Called once when the plugin manager is built."""


@hookspec
def register_tracers(register: Callable[[Tracer], None]) -> None:
    """Register tracers: ``Tracer`` instances that capture spans from an instrumentation layer that is not
    tied to one agent framework (for example AgentOps / OpenTelemetry). Each is instrumented around every
    rollout, whatever the adapter."""


@hookspec(firstresult=True)
def adapter_for(agent: Any) -> Adapter | None:
    """Return the adapter that runs ``agent``, or None to let later plugins decide. The first non-None
    answer wins; when every plugin answers None, the manager asks each registered adapter's ``accepts`` and
    exactly one must claim the agent."""


@hookspec
def rollout_context(rollout: Rollout) -> AbstractAsyncContextManager[Any] | None:
    """Return an async context manager to enter around the run of ``rollout`` (for example to switch off a
    framework's telemetry or to point a tracer at the rollout), or None. All returned managers are entered,
    in plugin order, and exited in reverse."""
