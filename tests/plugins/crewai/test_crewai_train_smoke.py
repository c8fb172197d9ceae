"""examples/crew_crewai/train.py trains briefly with the embedded model: one GRPO step through the crew."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRAIN = Path(__file__).resolve().parents[3] / "examples" / "crew_crewai" / "train.py"


@pytest.mark.slow
def test_the_example_trains_one_step_with_the_embedded_model(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(TRAIN), "--steps", "1", "--run-dir", str(tmp_path), "--no-preflight"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    (train,) = [r for r in records if r["kind"] == "train"]
    assert train["rollouts"] == 8 and train["transitions"] > 0
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 1]
    assert (tmp_path / "grpo" / "checkpoint" / "config.json").exists()
