"""The README's "Train your own agent" block runs as written, with only what a test machine lacks swapped in:
the teacher's URL points at tether's fake OpenAI-compatible server (answering right), ``model="smollm2"`` is a
fresh nano embedded model, and the counts are small. A README that drifts from the API fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("tether_openai")
pytest.importorskip("peft")

from tether.models.embedded import EmbeddedBackend
from tether.testing.fake_llm import FakeLLM, Reply, text

README = Path(__file__).resolve().parents[3] / "README.md"


def _the_block() -> str:
    section = README.read_text().split("## Train your own agent", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's 'Train your own agent' section has a python block"
    return found.group(1)


def _teacher(request: dict[str, Any]) -> Reply:
    a, b = map(int, re.findall(r"\d+", str(request["messages"][-1]["content"]))[:2])
    return text(str(a + b))


@pytest.fixture
def teacher() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_teacher) as llm:
        yield llm


def test_the_readme_example_trains(
    teacher: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the run folder goes under runs/ here
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the user's agent builds its client with their key
    block = _the_block()
    swaps = {
        '"https://api.example.com/v1", rollouts=64': f'"{teacher.base_url}", rollouts=24',
        'model="smollm2"': "model=STUDENT",
        "steps=8, eval_every=4": "steps=1, eval_every=1, progress=False",
        "group_size=4, tasks_per_step=4": "group_size=4, tasks_per_step=2",
        "tasks[:300]": "tasks[:24]",
        "tasks[300:340]": "tasks[390:]",
    }
    for old, new in swaps.items():
        assert old in block, f"the README block no longer says {old!r}: update this test's swaps"
        block = block.replace(old, new)
    student = EmbeddedBackend(preset="nano", seed=0)
    namespace: dict[str, Any] = {"STUDENT": student}
    exec(compile(block, str(README), "exec"), namespace)
    result = namespace["result"]
    out = capsys.readouterr().out
    assert "rollout" in out  # the dev report was printed
    warm = next(h for h in result.history if h.get("kind") == "warmstart")
    assert warm["kept"] > 0 and warm["teacher_reward"] == 1.0  # the teacher's rewarded runs were kept
    assert [h["stage"] for h in result.history if h["kind"] == "train"] == ["grpo"]
    assert "95 %" in out  # the summary table, with its intervals
