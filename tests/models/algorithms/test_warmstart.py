"""tether.WarmStart: a fresh embedded model learns a plain OpenAI-client agent's tool call from a teacher (the
fake OpenAI-compatible server, scripted), keeping only the teacher's rollouts that reach ``min_reward``; and
``Trainer(algorithm=[WarmStart, GRPO])`` runs both in one run folder that resumes without asking the teacher
again."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


def add_agent(task: str) -> str:
    """The user's agent: asks the model, which should call ``calc``; returns the expression it passed."""
    reply = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": task}], tools=TOOLS, max_tokens=24
    )
    calls = reply.choices[0].message.tool_calls or []
    if not calls:
        return ""
    return str(json.loads(calls[0].function.arguments or "{}").get("expr", ""))


def _numbers(task: str) -> tuple[int, int]:
    a, b = re.findall(r"\d+", task)
    return int(a), int(b)


def reward(task: str, output: str) -> float:
    a, b = _numbers(task)
    return float(output == f"{a}+{b}")


def _tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Add {(offset + i) % 7} and {(offset + 3 * i) % 5}." for i in range(n)]


def teacher_reply(request: dict[str, Any]) -> Reply:
    """The teacher: the right call for even first numbers, a subtraction (reward 0) for odd ones."""
    asked = str(request["messages"][-1]["content"])
    a, b = _numbers(asked)
    if not request.get("tools"):
        return text("no tools?")
    return tool_call("calc", {"expr": f"{a}+{b}" if a % 2 == 0 else f"{a}-{b}"})


@pytest.fixture
def teacher() -> Iterator[FakeLLM]:
    with FakeLLM(handler=teacher_reply) as llm:
        yield llm


@pytest.fixture
def student() -> Iterator[EmbeddedBackend]:
    backend = EmbeddedBackend(preset="nano", seed=0)
    yield backend
    asyncio.run(backend.close())


def test_warm_start_learns_the_teachers_good_tool_calls(
    teacher: FakeLLM, student: EmbeddedBackend, tmp_path: Path
) -> None:
    warm = tether.WarmStart(teacher=teacher.base_url, rollouts=96, min_reward=1.0, epochs=12, lr=3e-3)
    trainer = tether.Trainer(model=student, algorithm=warm, n_runners=8, name="ws", run_root=str(tmp_path))
    trainer.progress = False
    result = trainer.fit(tether.wrap(add_agent, reward=reward), train=_tasks(48), val=_tasks(16, offset=100))
    record = next(h for h in result.history if h["kind"] == "warmstart")
    data = next(h for h in result.history if h["kind"] == "sft_data")
    assert record["teacher_rollouts"] == 96 and record["asked"] == 96
    assert 0.3 < record["teacher_reward"] < 0.7  # the teacher is right about half the time
    assert data["rollouts_kept"] == record["kept"] < 96  # only the rewarded rollouts trained
    assert data["retokenized"] == data["examples"] == record["kept"]  # through the student's template
    assert len(teacher.chat_requests) >= 96
    before, after = result.before, result.after
    assert before is not None and after is not None
    assert before["greedy_tool_rate"] == 0.0  # random weights: no tool call
    assert after["greedy_tool_rate"] >= 0.75, (before, after)
    # the fresh model's tokenizer was fitted to the teacher's traffic (once: the model is trained now)
    prompt = student.render([{"role": "user", "content": _tasks(1)[0]}], TOOLS)
    untouched = EmbeddedBackend(preset="nano", seed=0)
    assert len(prompt) < len(untouched.render([{"role": "user", "content": _tasks(1)[0]}], TOOLS))
    assert not student.refit_tokenizer(["more text"])


def test_warm_start_then_grpo_in_one_run_resumes_without_the_teacher(
    teacher: FakeLLM, student: EmbeddedBackend, tmp_path: Path
) -> None:
    def trainer(steps: int) -> tether.Trainer:
        return tether.Trainer(
            model=student,
            algorithm=[
                tether.WarmStart(teacher=teacher.base_url, rollouts=16, min_reward=1.0, epochs=1),
                tether.GRPO(group_size=2, tasks_per_step=2),
            ],
            n_runners=4,
            steps=steps,
            eval_every=1,
            name="both",
            run_root=str(tmp_path),
            progress=False,
            sampling={"max_tokens": 16},
        )

    agent = tether.wrap(add_agent, reward=reward)
    first = trainer(2).fit(agent, train=_tasks(8), val=_tasks(2, offset=50))
    run = tmp_path / "both"
    asked = len(teacher.chat_requests)
    assert json.loads((run / "stages.json").read_text())["done"] == 2
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["stage_name"] == "grpo"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in records if r["kind"] in ("warmstart", "sft_data")] == ["warmstart"] * 2
    sft_steps = [r["step"] for r in records if r["kind"] == "sft"]
    grpo_steps = [r["step"] for r in records if r["kind"] == "train"]
    assert grpo_steps == [sft_steps[-1] + 1, sft_steps[-1] + 2]  # one step axis: GRPO carries on
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) == 4  # base, after the warm start (GRPO's start: not repeated), steps 1 and 2
    assert first.before == evals[0] | {}
    if importlib.util.find_spec("matplotlib") is not None:  # the curve is drawn when matplotlib is installed
        assert first.plot is not None and first.plot.exists()

    second = trainer(3).fit(agent, train=_tasks(8), val=_tasks(2, offset=50), resume=True)
    assert len(teacher.chat_requests) == asked  # the warm start was not redone
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["stage_name"] == "grpo"
    train = [h for h in second.history if h["kind"] == "train"]
    assert [h["step"] for h in train] == [*grpo_steps, grpo_steps[-1] + 1]


def test_warm_start_says_what_is_wrong(teacher: FakeLLM, student: EmbeddedBackend, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a teacher"):
        tether.WarmStart(teacher=" ")
    with pytest.raises(ValueError, match="rollouts >= 1"):
        tether.WarmStart(teacher=teacher.base_url, rollouts=0)
    with pytest.raises(TypeError, match="OpenAI-compatible URL or a ModelBackend"):
        tether.WarmStart(teacher=42)  # type: ignore[arg-type]

    def never(task: str, output: str) -> float:
        return 0.0

    trainer = tether.Trainer(
        model=student,
        algorithm=tether.WarmStart(teacher=teacher.base_url, rollouts=4),
        n_runners=4,
        name="bad",
        run_root=str(tmp_path),
        progress=False,
    )
    with pytest.raises(ValueError, match=r"none of the teacher's 4 finished rollouts reached min_reward=1.0"):
        trainer.fit(tether.wrap(add_agent, reward=never), train=_tasks(4))
    remote = tether.Trainer(
        model=teacher.base_url,
        algorithm=tether.WarmStart(teacher=teacher.base_url, rollouts=4),
        name="remote",
        run_root=str(tmp_path),
        progress=False,
    )
    with pytest.raises(ValueError, match="fine-tunes a model tether holds in torch"):
        remote.fit(tether.wrap(add_agent, reward=reward), train=_tasks(4))


def two_agents(task: str) -> dict[str, str]:
    """Two sub-agents (``agent_scope``): the writer and the checker, one call each."""
    from tether.capture.context import agent_scope

    out = {}
    for name in ("writer", "checker"):
        with agent_scope(name):
            reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
        out[name] = reply.choices[0].message.content or ""
    return out


def test_warm_start_trains_each_policy_on_its_own_calls(tmp_path: Path) -> None:
    """``optimize={"w": ["writer"]}``: the writer's calls train policy w; the checker, named by no policy, is
    served by the frozen start and its weights never move."""
    import torch

    with FakeLLM(handler=lambda request: text("yes")) as teacher:
        student = EmbeddedBackend(preset="nano", seed=0)
        try:
            trainer = tether.Trainer(
                model=student,
                algorithm=tether.WarmStart(teacher=teacher.base_url, rollouts=8, min_reward=0.0, epochs=2),
                n_runners=4,
                name="policies",
                run_root=str(tmp_path),
                progress=False,
            )
            agent = tether.wrap(two_agents, reward=lambda task, output: 1.0, optimize={"w": ["writer"]})
            result = trainer.fit(agent, train=_tasks(8))
            assert student.policies is not None
            with student.policy("w") as model:
                trained = {k: v.clone() for k, v in model.state_dict().items()}
            frozen = {k: v.clone() for k, v in student.model.state_dict().items()}
        finally:
            asyncio.run(student.close())
    data = next(h for h in result.history if h["kind"] == "sft_data")
    assert data["examples"] == 8  # the writer's calls only, not the checker's
    steps = [h for h in result.history if h["kind"] == "sft"]
    assert steps and all(h["trained_examples/w"] > 0 for h in steps)
    assert any(not torch.equal(trained[k], frozen[k]) for k in frozen)
    assert (result.run_dir / "checkpoint" / "policies.json").exists()
