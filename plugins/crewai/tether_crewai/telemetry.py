"""Switches CrewAI's calls home off while rollouts run.

CrewAI records anonymous telemetry (OpenTelemetry spans exported to its collector), may upload execution
traces, checks PyPI for a newer version when a crew is verbose, and LiteLLM (CrewAI's fallback for models
without a native provider) downloads a cost map at import. Each is controlled by an environment variable
read when the call would happen, so the rollout context sets them for as long as any rollout runs and then
puts back exactly what was there (environment variables are process-wide: they are held, reference-counted,
across concurrent rollouts). Nothing is imported.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator

#: set while rollouts run
QUIET_ENV: dict[str, str] = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}

_lock = threading.Lock()
_holders = 0
_saved: dict[str, str | None] = {}


def hold() -> None:
    """Set ``QUIET_ENV`` (the first holder saves what was there)."""
    global _holders
    with _lock:
        if _holders == 0:
            _saved.clear()
            for key, value in QUIET_ENV.items():
                _saved[key] = os.environ.get(key)
                os.environ[key] = value
        _holders += 1


def release() -> None:
    """Undo ``hold`` (the last holder restores the saved values)."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            for key, value in _saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _saved.clear()


@contextlib.asynccontextmanager
async def crewai_quiet() -> AsyncIterator[None]:
    hold()
    try:
        yield
    finally:
        release()
