"""Keeping the user's AgentOps offline while tether trains: settings for ``agentops.init`` and a check of them.

AgentOps (0.4) works without an API key and makes no call at ``init``, but it sends spans to its OTLP
endpoint, uploads what ``print`` wrote when the first root span ends, and writes ``./agentops.log``. All three
are set when ``agentops.init`` runs, from its arguments or the ``AGENTOPS_*`` environment variables, so the
settings must be in place before the user's code calls it: ``use_offline()`` (or the same variables exported in
the shell) points both endpoints at a loopback port where nothing listens and turns file logging off.
"""

from __future__ import annotations

import logging
import os
import sys
from urllib.parse import urlsplit

#: the discard port on loopback: nothing listens there, so AgentOps' uploads are refused at once
LOOPBACK_ENDPOINT = "http://127.0.0.1:9"

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def offline_env(endpoint: str = LOOPBACK_ENDPOINT) -> dict[str, str]:
    """The ``AGENTOPS_*`` variables that keep AgentOps on ``endpoint`` (a loopback URL) with no log file."""
    _check_loopback(endpoint)
    base = endpoint.rstrip("/")
    return {
        "AGENTOPS_API_ENDPOINT": base,
        "AGENTOPS_APP_URL": base,
        "AGENTOPS_EXPORTER_ENDPOINT": f"{base}/v1/traces",
        "AGENTOPS_LOGGING_TO_FILE": "false",
        "AGENTOPS_LOG_SESSION_REPLAY_URL": "false",
    }


def use_offline(endpoint: str = LOOPBACK_ENDPOINT) -> None:
    """Set ``offline_env(endpoint)`` in ``os.environ``; call it before the agent's code runs ``agentops.init``."""
    os.environ.update(offline_env(endpoint))


def offline_problems() -> list[str]:
    """What in the running AgentOps client would reach beyond this machine or write ``./agentops.log``
    (empty when AgentOps is not imported or not initialised). Never imports AgentOps."""
    agentops = sys.modules.get("agentops")
    client = getattr(agentops, "_client", None) if agentops is not None else None
    config = getattr(client, "config", None)
    if config is None or not getattr(client, "initialized", False):
        return []
    problems = []
    for setting, variable in (
        ("endpoint", "AGENTOPS_API_ENDPOINT"),
        ("exporter_endpoint", "AGENTOPS_EXPORTER_ENDPOINT"),
    ):
        url = getattr(config, setting, None)
        if isinstance(url, str) and not _is_loopback(url):
            problems.append(f"AgentOps {setting} is {url} (set {variable} to a loopback URL)")
    if any(isinstance(h, logging.FileHandler) for h in logging.getLogger("agentops").handlers):
        problems.append("AgentOps writes ./agentops.log (set AGENTOPS_LOGGING_TO_FILE=false)")
    return problems


def _is_loopback(url: str) -> bool:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host is not None and host in _LOOPBACK_HOSTS


def _check_loopback(endpoint: str) -> None:
    if not _is_loopback(endpoint):
        raise ValueError(
            f"endpoint must be a loopback URL such as {LOOPBACK_ENDPOINT!r} (127.0.0.1, ::1 or localhost), "
            f"got {endpoint!r}"
        )
