"""A seeded run repeats bit for bit (issue 23): ``WarmStart`` then ``GRPO`` on a fresh embedded model, run twice
with the same seed and concurrent runners, ends with the same tokenizer, the same weights and the same
held-out scores, whatever order the rollouts finished in.

The teacher is the fake OpenAI-compatible server, which (like a real API) makes up a random id for each tool
call: those ids are no part of what the student learns, so they must not reach its tokenizer."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")
torch = pytest.importorskip("torch")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, Reply, tool_call  # noqa: E402

torch.set_num_threads(1)

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


def calc_agent(task: str) -> str:
    """The user's agent: the model should call ``calc``; returns the expression it passed."""
    reply = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": task}], tools=TOOLS, max_tokens=16
    )
    calls = reply.choices[0].message.tool_calls or []
    return str(json.loads(calls[0].function.arguments or "{}").get("expr", "")) if calls else ""


def reward(task: str, output: str) -> float:
    a, b = re.findall(r"\d+", task)
    return float(output == f"{a}+{b}")


def teacher_reply(request: dict[str, Any]) -> Reply:
    """Right for even first numbers, a subtraction for odd ones; the call's id is the server's, at random."""
    a, b = re.findall(r"\d+", str(request["messages"][-1]["content"]))
    return tool_call("calc", {"expr": f"{a}+{b}" if int(a) % 2 == 0 else f"{a}-{b}"})


def _tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Add {(offset + i) % 9} and {(offset + 5 * i) % 7}." for i in range(n)]


def _run(root: Path) -> tuple[str, str, list[Any]]:
    """One seeded run: the tokenizer's vocabulary and the weights (as digests) and the held-out scores."""
    student = EmbeddedBackend(preset="nano", seed=0)
    try:
        with FakeLLM(handler=teacher_reply) as teacher:
            trainer = tether.Trainer(
                model=student,
                algorithm=[
                    tether.WarmStart(teacher=teacher.base_url, rollouts=48, min_reward=0.0, epochs=2, lr=3e-3),
                    tether.GRPO(group_size=4, tasks_per_step=4, lr=2e-3),
                ],
                n_runners=8,  # rollouts finish in whatever order the threads make
                steps=2,
                eval_every=2,
                seed=0,
                name="repro",
                run_root=str(root),
                progress=False,
                sampling={"max_tokens": 16},
            )
            result = trainer.fit(
                tether.wrap(calc_agent, reward=reward), train=_tasks(24), val=_tasks(12, 100), preflight=False
            )
        weights = hashlib.sha256()
        for name, tensor in sorted(student.model.state_dict().items()):
            weights.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
        vocab = json.dumps(sorted(student.tokenizer.get_vocab().items()))
        scores = [{k: v for k, v in e.items() if k.endswith("accuracy")} for e in result.evals]
        return hashlib.sha256(vocab.encode()).hexdigest(), weights.hexdigest(), scores
    finally:
        asyncio.run(student.close())


def test_a_seeded_warm_start_then_grpo_repeats_bit_for_bit(tmp_path: Path) -> None:
    first_vocab, first_weights, first_scores = _run(tmp_path / "one")
    second_vocab, second_weights, second_scores = _run(tmp_path / "two")
    assert first_vocab == second_vocab, "the fitted tokenizer differs between two runs of one seed"
    assert first_weights == second_weights, "the weights differ between two runs of one seed"
    assert first_scores == second_scores
    assert len(first_scores) >= 3  # before, after the warm start, after GRPO
