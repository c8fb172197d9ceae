"""The model proxy: an OpenAI-compatible server whose URL names the rollout attempt, recording each call.

``ProxyServer`` (in ``tether.proxy.server``) is imported on first use so that importing the request parser
or the SSE helpers does not load the HTTP server and the backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.proxy.server import ProxyServer

__all__ = ["ProxyServer"]


def __getattr__(name: str) -> Any:
    if name == "ProxyServer":
        from tether.proxy.server import ProxyServer

        return ProxyServer
    raise AttributeError(f"module 'tether.proxy' has no attribute {name!r}")
