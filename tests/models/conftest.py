"""Fixtures for the torch tests: tiny embedded models built once per session (nothing is downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tether.models.embedded import EmbeddedModel, create_embedded, sft  # noqa: E402

torch.set_num_threads(1)

CALC_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}
SYSTEM = {"role": "system", "content": "Use calc, then answer with the number."}


def calc_conversation(rng: random.Random) -> list[dict[str, Any]]:
    """A demonstration: question → calc tool call → tool result → the number."""
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    expr = f"{a}+{b}"
    call = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": expr})}}
    return [
        SYSTEM,
        {"role": "user", "content": f"What is {expr}?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": str(a + b)},
        {"role": "assistant", "content": str(a + b)},
    ]


@pytest.fixture(scope="session")
def calc_tool() -> dict[str, Any]:
    return CALC_TOOL


@pytest.fixture(scope="session")
def make_calc_conversation() -> Any:
    return calc_conversation


@pytest.fixture(scope="session")
def nano() -> EmbeddedModel:
    """A ~140k-parameter model; tests must not train it (session-shared)."""
    return create_embedded(["What is 12+7? The answer is 19."], preset="nano", seed=0)


@pytest.fixture(scope="session")
def nano_dir(nano: EmbeddedModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nano.save(tmp_path_factory.mktemp("nano"))


LETTERS = "abcdefgh"


def letter_tasks(n: int, offset: int = 0) -> list[str]:
    """The toy task of the fit tests: the agent answers with one letter; "a" and "b" are rewarded."""
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


@pytest.fixture(scope="session")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nano model fine-tuned to answer one letter uniformly: about a quarter of its answers are good
    (session-shared as a directory: each test loads its own copy)."""
    rng = random.Random(0)
    demos = [
        [{"role": "user", "content": task}, {"role": "assistant", "content": rng.choice(LETTERS)}]
        for task in letter_tasks(400)
    ]
    model = create_embedded([d[0]["content"] for d in demos] + list(LETTERS), preset="nano", seed=0)
    sft(model, demos, epochs=3, lr=3e-3, batch_size=32, seed=0, progress=False)
    return model.save(tmp_path_factory.mktemp("warm"))


# -- a tiny hf: checkpoint (random Llama, own BPE tokenizer, ChatML template) ----------------------------


@pytest.fixture(scope="session")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A non-embedded checkpoint: its own tokenizer, ChatML template with tools, Hermes tool calls."""
    from tether.testing import tiny_llama

    return tiny_llama.write(tmp_path_factory.mktemp("chatml"))
