"""Run by ``test_crewai_offline.py`` in a fresh process: records (and blocks) every outbound connection and
DNS lookup while the example crew runs, then flushes CrewAI's telemetry so that anything it recorded is
sent now, and prints what was attempted as JSON.

``python crewai_offline_script.py tether``: rollouts through ``Trainer.dev`` (the plugin's rollout context).
``python crewai_offline_script.py control``: the same crew kicked off directly, without tether (must call home,
or the recorder proves nothing).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
attempts: list[str] = []

_connect = socket.socket.connect
_getaddrinfo = socket.getaddrinfo


def _connect_recorded(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in LOOPBACK:
        attempts.append(f"connect {host}")
        raise OSError(f"outbound connection to {host} blocked by the test")
    return _connect(self, address)


def _getaddrinfo_recorded(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name not in LOOPBACK:
        attempts.append(f"resolve {name}")
        raise socket.gaierror(f"lookup of {name} blocked by the test")
    return _getaddrinfo(host, *args, **kwargs)


def main(mode: str) -> None:
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parents[2] / "examples" / "crew_crewai")]
    for key in (
        "CREWAI_DISABLE_TELEMETRY",
        "CREWAI_DISABLE_TRACKING",
        "OTEL_SDK_DISABLED",
        "CREWAI_TRACING_ENABLED",
    ):
        os.environ.pop(key, None)
    socket.socket.connect = _connect_recorded  # type: ignore[method-assign]
    socket.getaddrinfo = _getaddrinfo_recorded  # type: ignore[assignment]

    import agent as example
    from crewai.telemetry import Telemetry
    from crewai_script import reply, task

    from tether.testing.fake_llm import FakeLLM

    with FakeLLM(handler=reply) as llm:
        if mode == "control":
            example.llm.base_url = llm.base_url
            example.llm._client = example.llm._async_client = None
            output = example.crew.copy().kickoff(inputs=task("Paris"))
            ok = "capital of France" in output.raw
        else:
            import tether

            report = tether.Trainer(model=llm.base_url).dev(
                tether.wrap(example.crew, reward=lambda t, o: 1.0), [task("Paris"), task("Atlantis")]
            )
            ok = all(r.status == "succeeded" and r.transitions for r in report.rollouts)
        telemetry = Telemetry()
        if telemetry.ready:
            telemetry.provider.force_flush()  # export now whatever the run recorded
    print(json.dumps({"ok": ok, "telemetry_ready": telemetry.ready, "attempts": attempts}))


if __name__ == "__main__":
    main(sys.argv[1])
