"""Who may be served: the bind rule every tether server follows (store, dashboard, model server, proxy), the
requests they refuse, and how a server command runs until it is told to stop.

A server binds loopback unless it is given a token; beyond loopback, anyone who can reach it could read and change
what it serves.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

_STORE_FIX = "Pass --token <secret> (or set TETHER_STORE_TOKEN)"


def check_bind(host: str, token: str | None, what: str = "the store", fix: str = _STORE_FIX) -> None:
    """Refuse to serve ``what`` beyond this machine without a token (``fix``: how to give it one)."""
    if token or is_loopback(unbracket(host)):
        return
    raise ValueError(
        f"refusing to serve {what} on {host!r} without a token: anyone who can reach it could read and "
        f"change it. {fix}, or bind 127.0.0.1"
    )


def unbracket(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


@functools.lru_cache(maxsize=1024)  # asked per request by every server (its socket's address): parse each once
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- requests a loopback server refuses ------------------------------------------------------------------

#: the body types tether's servers take; a browser cannot send either across origins without a CORS
#: preflight (which tether's servers never grant), so a web page cannot forge a write
BODY_TYPES = ("application/json", "application/x-protobuf")
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header or of an origin's authority (``[::1]:80`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_local_name(name: str) -> bool:
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)


def refusal(
    method: str,
    host: str | None,
    origin: str | None,
    content_type: str,
    local_address: str | None,
    *,
    token: bool = False,
) -> tuple[int, str] | None:
    """Why a request to a tether server must be refused (an HTTP status and a message), or None.

    - On a loopback socket of a server without a ``token``, the ``Host`` must name this machine: a page of
      ``attacker.example`` made to resolve to 127.0.0.1 (DNS rebinding) is refused (403), so it cannot read
      what the server holds. (With a token such a page lacks it, and the dashboard's cookie is not sent to it.)
    - A write (any method but GET/HEAD/OPTIONS) with a foreign ``Origin`` is refused (403), and one whose body
      is not JSON (or OTLP protobuf) is refused (415): what a web page's form or ``fetch`` can send without
      asking the server first (``text/plain``, forms) never reaches a handler.
    """
    local = local_address is not None and is_loopback(local_address)
    if local and not token and host is not None and not _is_local_name(_hostname(host)):
        return 403, (
            f"Host {host[:80]!r} does not name this machine: a server on loopback answers only requests for "
            "localhost or a loopback address (this refuses web pages that rebind their name to 127.0.0.1)"
        )
    if method.upper() in _SAFE_METHODS:
        return None
    if origin is not None and origin != "null":
        authority = origin.split("://", 1)[-1]
        name = _hostname(authority)
        same = host is not None and _hostname(host) == name
        if not same and not (local and _is_local_name(name)):
            return 403, f"cross-origin write refused: Origin {origin[:80]!r} is not this server's"
    if content_type not in BODY_TYPES:
        return 415, (
            f"{method} needs a body of Content-Type application/json (OTLP: application/x-protobuf), got "
            f"{content_type or 'none'!r}"
        )
    return None


def local_address(transport: object) -> str | None:
    """The local IP of a request's connection (asyncio transport), or None when unknown."""
    get = getattr(transport, "get_extra_info", None)
    sockname = get("sockname") if get is not None else None
    if isinstance(sockname, tuple) and sockname:
        return str(sockname[0])
    return None


def request_refusal(
    request: web.BaseRequest, *, token: bool, content_type: str | None = None
) -> tuple[int, str] | None:
    """``refusal`` of an aiohttp request, on the socket it came in on (``content_type``: as the server reads
    it; the request's own by default)."""
    return refusal(
        request.method,
        request.headers.get("Host"),
        request.headers.get("Origin"),
        request.content_type if content_type is None else content_type,
        local_address(request.transport),
        token=token,
    )


# -- a server command's life ----------------------------------------------------------------------------


async def run_until_signalled(stop: Callable[[], Awaitable[None]], listening: str, stopped: str) -> None:
    """Print ``listening``, wait for SIGINT or SIGTERM, then ``stop()`` the server and print ``stopped``."""
    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled.set)
    print(listening, flush=True)
    try:
        await signalled.wait()
    finally:
        await stop()
        print(stopped, flush=True)
