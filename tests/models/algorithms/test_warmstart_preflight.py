"""Issue 37 item 4: a warm start's teacher is probed once in the preflight (one short call answered within
``WarmStart(teacher_timeout_s=)``), so a teacher that hangs or cannot be reached stops the run at once, named;
and when no teacher rollout finished, the advice says so instead of "lower min_reward"."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def add_agent(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}], max_tokens=8)
    return reply.choices[0].message.content or ""


def reward(task: str, output: str) -> float:
    return float(bool(output))


def _tasks(n: int) -> list[str]:
    return [f"Add {i} and {i + 1}." for i in range(n)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trainer(teacher: str, tmp_path: Path, name: str, **warm: float) -> tether.Trainer:
    return tether.Trainer(
        model=EmbeddedBackend(preset="nano", seed=0),
        algorithm=[tether.WarmStart(teacher=teacher, rollouts=4, **warm), tether.GRPO(group_size=2)],  # type: ignore[arg-type]
        n_runners=4,
        steps=1,
        name=name,
        run_root=str(tmp_path),
        progress=False,
    )


def test_a_hanging_teacher_fails_in_the_preflight_naming_it(tmp_path: Path) -> None:
    with FakeLLM(handler=lambda request: text("late", delay_s=60)) as teacher:
        trainer = _trainer(teacher.base_url, tmp_path, "hang", teacher_timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(tether.FitError, match=rf"teacher {teacher.base_url} did not answer .* within 1 s"):
            trainer.fit(tether.wrap(add_agent, reward=reward), train=_tasks(4))
        assert time.monotonic() - started < 30
        assert len(teacher.chat_requests) <= 1  # the probe alone: no teacher rollout ran


def test_an_unreachable_teacher_fails_in_the_preflight_naming_it(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(tether.FitError, match=rf"teacher {url} failed a one-token call: cannot reach"):
        _trainer(url, tmp_path, "gone").fit(tether.wrap(add_agent, reward=reward), train=_tasks(4))


def test_zero_finished_teacher_rollouts_get_advice_for_that(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    trainer = _trainer(url, tmp_path, "none")
    with pytest.raises(ValueError, match=r"none of the teacher's 4 rollouts finished \(4 failed") as info:
        trainer.fit(tether.wrap(add_agent, reward=reward), train=_tasks(4), preflight=False)
    assert "lower min_reward" not in str(info.value)


def test_a_teacher_url_without_a_host_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="names no host"):
        tether.WarmStart(teacher="http://")
    with pytest.raises(ValueError, match="teacher_timeout_s"):
        tether.WarmStart(teacher="http://127.0.0.1:1/v1", teacher_timeout_s=0)
