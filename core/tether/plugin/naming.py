"""A name for a framework object the user did not name: the module-level variable that holds it.

PydanticAI and smolagents let an agent go without a name (PydanticAI then names it after whatever variable the
code that first runs it holds it in, which may be a local such as ``agent`` or ``specialist_agent``). tether's
capture needs one stable name per agent for ``optimize=`` and policy maps, and the variable the user defined the
agent as (``cardiology_agent = Agent(...)``) is the name the user knows. ``global_name`` finds it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def global_name(obj: Any, first: Mapping[str, Any] | None = None) -> str | None:
    """The name of a module-level variable holding ``obj`` (identity): looked up in ``first`` (a frame's
    globals) before every loaded module, skipping private names; None when no module holds it."""
    scopes: list[Mapping[str, Any]] = [first] if first is not None else []
    scopes += [vars(module) for module in list(sys.modules.values()) if module is not None]
    for scope in scopes:
        try:
            items = list(scope.items())
        except Exception:  # a module whose namespace cannot be read (a lazy proxy)
            continue
        for name, value in items:
            if value is obj and not name.startswith("_"):
                return name
    return None
