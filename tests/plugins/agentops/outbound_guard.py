"""Blocks and records every network connection a process attempts beyond loopback (and every name lookup
of a host that is not loopback), so a test can assert that none was attempted. Loopback attempts are
recorded too, which shows the guard saw the process's traffic at all."""

from __future__ import annotations

import socket
from typing import Any

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

attempts: list[dict[str, Any]] = []

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _is_loopback(host: Any) -> bool:
    return isinstance(host, str) and (host in LOOPBACK or host.startswith("127."))


def _check(sock: socket.socket, address: Any) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host, port = address[0], address[1]
    allowed = _is_loopback(host)
    attempts.append({"what": "connect", "host": host, "port": port, "blocked": not allowed})
    if not allowed:
        raise ConnectionRefusedError(f"outbound connection to {host}:{port} blocked by the test")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(self, address)
    return _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(self, address)
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if name is not None and not _is_loopback(name):
        attempts.append({"what": "lookup", "host": name, "blocked": True})
        raise socket.gaierror(socket.EAI_NONAME, f"name lookup of {name} blocked by the test")
    return _getaddrinfo(host, *args, **kwargs)


def install() -> None:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo


def blocked() -> list[dict[str, Any]]:
    return [a for a in attempts if a["blocked"]]
