"""tether's own hook implementations, registered like any plugin and run last."""

from __future__ import annotations

from typing import Any

from tether.adapters import Adapter
from tether.hookspecs import hookimpl


@hookimpl(trylast=True)
def adapter_for(agent: Any) -> Adapter | None:
    """Ask each registered adapter whether it accepts ``agent``; exactly one must."""
    from tether.plugins import AdapterNotFound, get_plugins

    claiming = [a for a in get_plugins().adapters() if a.accepts(agent)]
    if len(claiming) > 1:
        names = ", ".join(a.name for a in claiming)
        raise AdapterNotFound(
            f"several adapters accept {type(agent).__qualname__} ({names}); choose one with "
            f'adapter="{claiming[0].name}"'
        )
    return claiming[0] if claiming else None
