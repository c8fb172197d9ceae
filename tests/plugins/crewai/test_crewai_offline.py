"""No outbound connection is attempted while tether runs a crew: CrewAI's telemetry, trace upload and
version check are off inside rollouts. Each case runs in a fresh process (CrewAI's telemetry is
process-wide) that records and blocks every non-loopback connection and DNS lookup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("crewai_offline_script.py")


def _run(mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_rollouts_attempt_no_outbound_connection() -> None:
    result = _run("tether")
    assert result["ok"], result
    assert result["attempts"] == [], result["attempts"]


def test_the_recorder_sees_crewai_call_home_without_tether() -> None:
    # the control: the same crew kicked off directly records telemetry, which the flush tries to send
    result = _run("control")
    assert result["ok"], result
    assert result["telemetry_ready"]
    assert any("crewai" in a for a in result["attempts"]), result["attempts"]
