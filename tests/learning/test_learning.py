"""Learning, guarded: each training path, seeded, must raise a held-out score well above noise in a few
minutes on two CPU cores — GRPO on a tool-using agent, GRPO with LoRA adapters, and a policy map
(``optimize={policy: [sub-agent]}``) whose two policies learn opposite preferences from identical prompts.
Each starts from a warm start made as a user makes one: ``tether.WarmStart`` against a scripted teacher.

A seeded run is reproducible (docs/reproducibility.md), so these figures are the same on every run of one
machine and torch build; a change that stops learning (a flipped loss sign, a learning rate that never
reaches the optimizer, advantages that no longer reach the loss) fails them. The bars sit far above the
noise of the held-out estimate: 64 tasks sampled at temperature 1, where a binomial standard error is at
most 0.0625."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402

torch = pytest.importorskip("torch")

from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call  # noqa: E402

torch.set_num_threads(1)

LETTERS = "abcdefgh"
PICK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "pick",
        "description": "Pick a letter",
        "parameters": {"type": "object", "properties": {"letter": {"type": "string"}}, "required": ["letter"]},
    },
}
SYSTEM = {"role": "system", "content": "Pick a letter with the pick tool."}


def tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


def _warm(directory: Path, agent_fn: Any, reply: Any, epochs: int) -> Path:
    """``tether.WarmStart`` in its own run: ``agent_fn`` runs once on each of 400 tasks against a scripted
    teacher that answers ``reply(letter)`` with a letter drawn uniformly (seed 0, the same letter for a task
    every time), and a fresh nano model (seed 0, its tokenizer fitted to the teacher's traffic) is fine-tuned
    on those calls."""
    rng = random.Random(0)
    letters = {t: rng.choice(LETTERS) for t in tasks(400)}

    def answer(request: dict[str, Any]) -> Reply:
        asked = next(str(m["content"]) for m in request["messages"] if m["role"] == "user")
        return reply(letters[asked])

    student = EmbeddedBackend(preset="nano", seed=0)
    with FakeLLM(handler=answer) as teacher:
        trainer = tether.Trainer(
            model=student,
            algorithm=tether.WarmStart(
                teacher=teacher.base_url,
                rollouts=400,
                min_reward=0.0,  # every demonstration: the letters are uniform, a quarter of them in {a, b}
                epochs=epochs,
                lr=3e-3,
                batch_size=32,
                micro_batch=32,
            ),
            n_runners=8,
            seed=0,
            name="warm",
            run_root=str(directory),
            progress=False,
            sampling={"max_tokens": 24},
        )
        try:
            result = trainer.fit(tether.wrap(agent_fn, reward=lambda task, out: 0.0), train=tasks(400))
        finally:
            asyncio.run(student.close())
    assert result.checkpoint is not None
    return result.checkpoint


@pytest.fixture(scope="session")
def letter_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Answers one letter, uniformly: a quarter of its answers are in {a, b}."""
    return _warm(tmp_path_factory.mktemp("letters"), pick_letter, text, epochs=3)


@pytest.fixture(scope="session")
def tool_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Calls ``pick`` with one letter, uniformly."""
    # (12 epochs: the call's format, reliably at T=1)
    return _warm(tmp_path_factory.mktemp("tool"), pick_with_tool, lambda x: tool_call("pick", {"letter": x}), 12)


client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
FIRST, LAST = {"a", "b"}, {"g", "h"}
VAL = tasks(64, offset=1000)


def pick_with_tool(task: str) -> str:
    """The user's agent: the model calls ``pick``; the agent runs the tool and returns what it picked."""
    messages: list[Any] = [SYSTEM, {"role": "user", "content": task}]
    reply = client.chat.completions.create(model="toy", messages=messages, tools=[PICK_TOOL])
    for call in reply.choices[0].message.tool_calls or []:
        if call.function.name == "pick":  # (the tool: a letter it was asked to pick)
            try:
                return str(json.loads(call.function.arguments).get("letter", ""))
            except (ValueError, AttributeError):
                return ""
    return ""


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return (reply.choices[0].message.content or "").strip()


def two_pickers(task: str) -> dict[str, str]:
    """Two sub-agents asked the same thing; the reward wants a different answer from each."""
    out = {}
    for name in ("first", "last"):
        with agent_scope(name):
            out[name] = pick_letter(task)
    return out


def _fit(model: str, agent: tether.WrappedAgent, run_root: Path, steps: int, **grpo: Any) -> tether.FitResult:
    trainer = tether.Trainer(
        model=model,
        algorithm=tether.GRPO(group_size=8, tasks_per_step=4, **grpo),
        n_runners=8,
        steps=steps,
        eval_every=steps,
        seed=0,
        name="learn",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 24},
    )
    return trainer.fit(agent, train=tasks(32), val=VAL)


def _gain(result: tether.FitResult, key: str = "sampled_accuracy") -> tuple[float, float]:
    before, after = result.before, result.after
    assert before is not None and after is not None and after["step"] > 0
    print(f"{key}: {before[key]:.3f} -> {after[key]:.3f}")  # (shown with pytest -rP)
    return before[key], after[key]


def test_grpo_teaches_a_tool_using_agent(tool_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(pick_with_tool, reward=lambda task, out: float(out in FIRST))
    result = _fit(f"embedded:{tool_start}", agent, tmp_path, steps=16, lr=2e-3)
    before, after = _gain(result)
    assert result.before is not None and result.before["sampled_tool_rate"] > 0.75  # (the warm start calls it)
    assert after - before > 0.3, (before, after)


def test_grpo_teaches_lora_adapters(letter_start: Path, tmp_path: Path) -> None:
    agent = tether.wrap(pick_letter, reward=lambda task, out: float(out in FIRST))
    # every linear layer and the output head: this 64-wide model's frozen final norm and tied embeddings cap what
    # adapters on the blocks alone can move (P(a or b) from 0.23 to about 0.29 at most,
    # tests/models/models/test_lora.py)
    layers = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    lora = tether.LoRA(r=8, alpha=16, target_modules=layers)
    result = _fit(f"embedded:{letter_start}", agent, tmp_path, steps=16, lr=3e-3, lora=lora)
    before, after = _gain(result)
    assert after - before > 0.2, (before, after)


def test_a_policy_map_teaches_each_policy_its_own_preference(letter_start: Path, tmp_path: Path) -> None:
    def reward(task: str, out: dict[str, str]) -> dict[str, float]:
        return {"first": float(out["first"] in FIRST), "last": float(out["last"] in LAST)}

    agent = tether.wrap(two_pickers, reward=reward, optimize={"early": ["first"], "late": ["last"]})
    result = _fit(f"embedded:{letter_start}", agent, tmp_path, steps=16, lr=2e-3)
    for target in ("first", "last"):  # one shared model could not learn both from the same prompt
        before, after = _gain(result, f"sampled_accuracy/{target}")
        assert after - before > 0.25, (target, before, after)
