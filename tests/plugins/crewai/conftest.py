"""The crewai plugin tests run the example crew (``examples/crew_crewai``), imported as its user imports it.

CrewAI's telemetry is left as installed here: the rollout context must switch it off (checked by
``test_crewai_offline.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "crew_crewai"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:crewai")
