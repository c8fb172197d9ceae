"""Who may be served: the bind rule every tether server follows (store, dashboard, model server).

A server binds loopback unless it is given a token; beyond loopback, anyone who can reach it could read and change
what it serves.
"""

from __future__ import annotations

import ipaddress


def check_bind(host: str, token: str | None, what: str = "the store") -> None:
    """Refuse to serve ``what`` beyond this machine without a token."""
    if token or is_loopback(unbracket(host)):
        return
    raise ValueError(
        f"refusing to serve {what} on {host!r} without a token: anyone who can reach it could read and "
        "change it. Pass --token <secret> (or set TETHER_STORE_TOKEN), or bind 127.0.0.1"
    )


def unbracket(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
