"""The agentops plugin tests: AgentOps is pointed at loopback with file logging off before the user's agent
module (which calls ``agentops.init`` at import) is imported by any test."""

from __future__ import annotations

import tether_agentops

tether_agentops.use_offline()


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    # AgentOps' exporter fails on current OpenTelemetry and logs it through a handler bound to the stderr it
    # saw at init (pytest's capture, closed at exit): export what is queued while that stream is still open
    provider = tether_agentops.agentops_provider()
    if provider is not None:
        provider.force_flush()
