"""Builds tether's plugin manager and wraps it in a typed facade; nothing else touches ``pm.hook``.

Plugins come from the ``tether`` entry-point group (bundled framework plugins and third-party ones) and
from ``register()`` calls. Each manager answers which adapter runs an agent from its own plugins: the first
non-None ``adapter_for`` hook answer, else the one registered adapter whose ``accepts`` claims it. A bundled
plugin declares ``EXTRA`` (its ``pip install "tether[extra]"`` name) and ``REQUIRES`` (top-level modules of
its framework); when one is missing, or an installed package's version is outside what the extra asks for in
the package metadata (``Requires-Dist``), the plugin is listed as unavailable with the install hint instead of
loaded, and the others are unaffected. ``TETHER_DISABLE_PLUGINS=a,b`` blocks plugins by name. A plugin whose
hook implementations name no hook (a misspelling) is rejected with a clear reason.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import pluggy

from tether.plugin import hookspecs
from tether.plugin._requirements import unmet as unmet_requirements
from tether.plugin.adapters import Adapter, Tracer
from tether.types import Rollout

ENTRY_POINT_GROUP = "tether"
DISABLE_ENV = "TETHER_DISABLE_PLUGINS"


class AdapterNotFound(LookupError):
    """No adapter, or more than one, claims an agent."""


@dataclass(slots=True)
class PluginInfo:
    name: str
    version: str | None
    hooks: list[str]
    source: str  # "entry point" or "registered"


@dataclass(slots=True)
class UnavailablePlugin:
    name: str
    reason: str
    hint: str | None = None  # the command that fixes it
    missing: list[str] = field(default_factory=list)


class Plugins:
    """Typed facade over the pluggy manager."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm
        self.unavailable: list[UnavailablePlugin] = []
        self._sources: dict[str, str] = {}
        self._versions: dict[str, str | None] = {}
        self._adapters: list[Adapter] | None = None
        self._tracers: list[Tracer] | None = None

    # -- registration -------------------------------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None, *, source: str = "registered") -> str:
        """Register a plugin object or module; returns its name. Rejects hook names that match no hook."""
        registered = self._pm.register(plugin, name=name)
        if registered is None:  # blocked
            raise ValueError(f"plugin {name!r} is blocked by {DISABLE_ENV}")
        bad = _misspelled_hooks(self._pm, plugin)
        if bad:
            self._pm.unregister(plugin)
            raise pluggy.PluginValidationError(
                plugin,
                f"plugin {registered!r} implements unknown hook(s) {', '.join(bad)}; "
                f"the hooks are: {', '.join(sorted(_hook_names()))}",
            )
        self._sources[registered] = source
        self._adapters = self._tracers = None
        return registered

    def unregister(self, name: str) -> None:
        self._pm.unregister(name=name)
        self._sources.pop(name, None)
        self._adapters = self._tracers = None

    # -- queries ------------------------------------------------------------------------------------------

    def loaded(self) -> list[PluginInfo]:
        out = []
        for name, plugin in self._pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = sorted(h.name for h in self._pm.get_hookcallers(plugin) or [])
            out.append(
                PluginInfo(
                    name=name,
                    version=self._versions.get(name),
                    hooks=hooks,
                    source=self._sources.get(name, "registered"),
                )
            )
        return out

    def adapters(self) -> list[Adapter]:
        if self._adapters is None:
            found: list[Adapter] = []
            self._pm.hook.register_adapters(register=_collector(found, Adapter))
            self._adapters = found
        return list(self._adapters)

    def tracers(self) -> list[Tracer]:
        if self._tracers is None:
            found: list[Tracer] = []
            self._pm.hook.register_tracers(register=_collector(found, Tracer))
            self._tracers = found
        return list(self._tracers)

    def adapter_named(self, name: str) -> Adapter:
        for adapter in self.adapters():
            if adapter.name == name:
                return adapter
        known = ", ".join(a.name for a in self.adapters()) or "none"
        hint = self._hint_for(name)
        raise AdapterNotFound(f"no adapter named {name!r} (loaded: {known}){hint}")

    def adapter_for(self, agent: Any) -> Adapter:
        """The adapter for ``agent``: the first plugin's ``adapter_for`` answer, else the one registered
        adapter whose ``accepts`` claims it. ``AdapterNotFound`` (naming ``adapter="..."``) if none or several
        do."""
        answer: Adapter | None = self._pm.hook.adapter_for(agent=agent)
        if answer is not None:
            return answer
        claiming = [a for a in self.adapters() if a.accepts(agent)]
        if len(claiming) > 1:
            names = ", ".join(a.name for a in claiming)
            raise AdapterNotFound(
                f"several adapters accept {type(agent).__qualname__} ({names}); choose one with "
                f'adapter="{claiming[0].name}"'
            )
        if not claiming:
            what = f"{type(agent).__module__}.{type(agent).__qualname__}"
            fixes = [hint for hint in (a.hint_for(agent) for a in self.adapters()) if hint]
            if fixes:  # an adapter knows this agent: its fix, not every framework's install hint
                raise AdapterNotFound(f"no adapter accepts {what}: {'; '.join(fixes)}")
            hints = "".join(f"\n  {u.hint}" for u in self.unavailable if u.hint)
            raise AdapterNotFound(
                f'no adapter accepts {what}; pass adapter="..." '
                f"(loaded: {', '.join(a.name for a in self.adapters()) or 'none'})"
                + (f", or install the framework's extra:{hints}" if hints else "")
            )
        return claiming[0]

    def rollout_contexts(self, rollout: Rollout) -> list[AbstractAsyncContextManager[Any]]:
        results = self._pm.hook.rollout_context(rollout=rollout)
        return [r for r in results if r is not None]

    def _hint_for(self, name: str) -> str:
        for u in self.unavailable:
            if u.name == name and u.hint:
                return f"; {u.reason}: {u.hint}"
        return ""


def _collector(into: list[Any], kind: type) -> Callable[[Any], None]:
    def register(obj: Any) -> None:
        if not isinstance(obj, kind):
            raise TypeError(f"register() takes {kind.__name__} instances, got {obj!r}")
        into.append(obj)

    return register


def _hook_names() -> set[str]:
    return {n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), "tether_spec")}


def _misspelled_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    known = _hook_names()
    bad = []
    for attr in dir(plugin):
        value = getattr(plugin, attr, None)
        opts = pm.parse_hookimpl_opts(plugin, attr) if callable(value) else None
        if opts is not None and attr not in known and not opts.get("optionalhook"):
            bad.append(attr)
    return bad


def _missing_modules(module_names: list[str]) -> list[str]:
    return [m for m in module_names if importlib.util.find_spec(m) is None]


def _dist_version(ep: importlib.metadata.EntryPoint) -> str | None:
    return ep.dist.version if ep.dist is not None else None


def build(*, entry_points: bool = True) -> Plugins:
    """Build a fresh plugin manager: the entry points (minus blocked ones), or no plugins with
    ``entry_points=False``."""
    pm = pluggy.PluginManager("tether")
    pm.add_hookspecs(hookspecs)
    plugins = Plugins(pm)
    blocked = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    for name in blocked:
        pm.set_blocked(name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points else ():
        if ep.name in blocked or pm.has_plugin(ep.name):
            continue
        _load_entry_point(plugins, ep)
    return plugins


def _load_entry_point(plugins: Plugins, ep: importlib.metadata.EntryPoint) -> None:
    try:
        module = ep.load()
    except ImportError as exc:  # a third-party plugin that needs something missing
        plugins.unavailable.append(UnavailablePlugin(ep.name, f"import failed: {exc}", missing=[str(exc.name)]))
        return
    except Exception as exc:  # a broken plugin must not break the others
        plugins.unavailable.append(UnavailablePlugin(ep.name, f"failed to load: {exc!r}"))
        return
    extra = getattr(module, "EXTRA", None)
    hint = f'pip install "tether[{extra}]"' if extra else None
    missing = _missing_modules(list(getattr(module, "REQUIRES", ())))
    if missing:
        plugins.unavailable.append(
            UnavailablePlugin(ep.name, f"not installed: {', '.join(missing)}", hint=hint, missing=missing)
        )
        return
    wrong = unmet_requirements(ep.dist, extra) if extra else []
    if wrong:
        plugins.unavailable.append(UnavailablePlugin(ep.name, f"needs {'; '.join(wrong)}", hint=hint))
        return
    try:
        plugins.register(module, name=ep.name, source="entry point")
    except pluggy.PluginValidationError as exc:
        plugins.unavailable.append(UnavailablePlugin(ep.name, str(exc)))
        return
    plugins._versions[ep.name] = getattr(module, "__version__", None) or _dist_version(ep)


_current: Plugins | None = None
_lock = threading.Lock()


def get_plugins() -> Plugins:
    """The process-wide plugin manager, built on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = build()
        return _current


def reset_plugins(replacement: Plugins | None = None) -> None:
    """Forget the process-wide manager (the next ``get_plugins()`` rebuilds it), or replace it (tests)."""
    global _current
    with _lock:
        _current = replacement
