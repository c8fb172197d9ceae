"""Sending the user's agent object to another process (``tether.RayRunners``' actors) by reference when it can be.

cloudpickle sends functions and classes by reference to their module, and any other object by value. An agent
object built when its module is imported (a compiled LangGraph graph, say) does not always survive being rebuilt
by value: LangGraph compares its sentinel objects by identity, and a graph rebuilt in another process holds copies
of them, which its own code does not recognise. So ``ship(obj)`` gives the ``ModuleGlobal`` that names an
importable module's global holding ``obj`` (the other process imports the module and takes its object), or ``obj``
itself when no module holds it (built inside a function, or in a ``__main__`` script: by value, as cloudpickle
sends it); ``unship`` undoes it.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any

#: modules another process cannot import by their name here
_NOT_IMPORTABLE = frozenset({"__main__", "__mp_main__"})
#: what pickle already sends by reference, or by value with no harm
_BY_PICKLE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    str,
    bytes,
    int,
    float,
)


@dataclass(frozen=True, slots=True)
class ModuleGlobal:
    """``module.name``, imported where it is unpickled."""

    module: str
    name: str

    def resolve(self) -> Any:
        try:
            return getattr(importlib.import_module(self.module), self.name)
        except (ImportError, AttributeError) as exc:
            raise ImportError(
                f"the agent is {self.module}.{self.name} in the trainer's process, but this process cannot import "
                f"it ({type(exc).__name__}: {exc}): install that module where the runners run, or ship it with "
                'RayRunners(runtime_env={"py_modules": [...]}) or {"working_dir": ...}'
            ) from exc


def module_global(obj: Any) -> ModuleGlobal | None:
    """The importable module global that holds ``obj`` (None: none does, or pickle sends it by reference
    anyway). When several do, the module imported last: the one that built it, when another module's
    ``from ... import`` is what imported it."""
    if obj is None or isinstance(obj, _BY_PICKLE):
        return None
    found = None
    for module_name, module in list(sys.modules.items()):
        if module_name in _NOT_IMPORTABLE or getattr(module, "__name__", None) != module_name:
            continue
        try:
            names = list(vars(module).items())
        except TypeError:  # a stand-in without a __dict__
            continue
        for name, value in names:
            if value is obj and not name.startswith("__"):
                found = ModuleGlobal(module_name, name)
                break
    return found


def ship(obj: Any) -> Any:
    """What to pickle for ``obj``: its ``ModuleGlobal`` when a module holds it, else ``obj``."""
    return module_global(obj) or obj


def unship(shipped: Any) -> Any:
    """The object ``ship`` stood for, in this process."""
    return shipped.resolve() if isinstance(shipped, ModuleGlobal) else shipped
