"""``bench/proxy_python.py`` runs at any number of bursts a user asks for, and refuses none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "proxy_python.py"), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("bursts", ["1", "2", "5"])
def test_proxy_python_runs_fewer_bursts_than_its_rounds(bursts: str) -> None:
    run = _bench("--bursts", bursts)
    assert run.returncode == 0, run.stderr
    assert f": {bursts} bursts of 32 per path" in run.stdout
    assert "ratio tether/floor on the path" in run.stdout


def test_proxy_python_refuses_no_bursts() -> None:
    run = _bench("--bursts", "0")
    assert run.returncode == 2
    assert "argument --bursts: 0: give at least 1 burst" in run.stderr
