"""Issue 37 item 5: a run whose steps stop training after an earlier stage trained (a warm start, then GRPO
steps whose groups all score alike) stops early with its result (summary row, history, checkpoint) instead of a
``FitError``; its messages use the run's step numbers; a resumed run never logs a step twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, text  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def agent(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}], max_tokens=6)
    return reply.choices[0].message.content or ""


def always(task: str, output: str) -> float:
    return 1.0  # every group flat: GRPO trains nothing


def _teacher(request: dict[str, Any]) -> Reply:
    return text("ok")


def _tasks(n: int) -> list[str]:
    return [f"task {i}" for i in range(n)]


@pytest.fixture
def teacher() -> Iterator[FakeLLM]:
    with FakeLLM(handler=_teacher) as llm:
        yield llm


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_flat_grpo_after_a_warm_start_stops_with_its_result(teacher: FakeLLM, tmp_path: Path) -> None:
    trainer = tether.Trainer(
        model=EmbeddedBackend(preset="nano", seed=0),
        algorithm=[
            tether.WarmStart(teacher=teacher.base_url, rollouts=4, min_reward=1.0, epochs=1),
            tether.GRPO(group_size=2, tasks_per_step=2),
        ],
        n_runners=4,
        steps=6,
        eval_every=10,
        stop_after_idle_steps=2,
        name="flat",
        run_root=str(tmp_path),
        progress=False,
    )
    with pytest.warns(UserWarning, match="stopped early"):
        result = trainer.fit(tether.wrap(agent, reward=always), train=_tasks(4), val=_tasks(2), preflight=False)
    records = _records(tmp_path / "flat")
    sft_last = max(r["step"] for r in records if r["kind"] == "sft")
    train = [r["step"] for r in records if r["kind"] == "train"]
    assert train == [sft_last + 1, sft_last + 2]  # two idle GRPO steps, on the run's step axis
    assert result.stopped is not None
    assert f"stopped early after step {sft_last + 2}:" in result.stopped  # the run's number, not GRPO's 2
    assert f"the last, step {sft_last + 2}" in result.stopped
    assert result.checkpoint is not None and (result.checkpoint / "trainer_state.json").exists()
    assert records[-1]["kind"] == "stop" and records[-1]["step"] == sft_last + 2
    assert any(h["kind"] == "eval" and h["step"] == sft_last + 2 for h in result.history)


def test_a_resumed_run_logs_each_step_once(tmp_path: Path) -> None:
    def trainer(steps: int) -> tether.Trainer:
        return tether.Trainer(
            model=EmbeddedBackend(preset="nano", seed=0),
            algorithm=tether.GRPO(group_size=2, tasks_per_step=2),
            n_runners=4,
            steps=steps,
            eval_every=2,
            stop_after_idle_steps=None,
            name="again",
            run_root=str(tmp_path),
            progress=False,
            sampling={"max_tokens": 6},
        )

    def reward(task: str, output: str) -> float:
        return float(len(output) % 2)

    wrapped = tether.wrap(agent, reward=reward)
    trainer(2).fit(wrapped, train=_tasks(4), preflight=False)
    run = tmp_path / "again"
    # the run logged step 3 and was killed before its next checkpoint (at step 4)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"kind": "train", "step": 3, "reward": 0.5, "trained": 1}) + "\n")
    result = trainer(4).fit(wrapped, train=_tasks(4), resume=True)
    steps = [r["step"] for r in _records(run) if r["kind"] == "train"]
    assert steps == [1, 2, 3, 4]
    assert [h["step"] for h in result.history if h["kind"] == "train"] == [1, 2, 3, 4]
