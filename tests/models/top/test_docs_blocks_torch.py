"""The docs' Python blocks that need torch run here (tox env ``embedded``), as written but for what a test
machine lacks: a nano embedded model or a tiny ``hf:`` checkpoint for a real one, the fake LLM for an API
teacher, one training step for a hundred. ``tests/core/top/test_docs_blocks.py`` checks every block is run
somewhere or marked not run."""

from __future__ import annotations

import asyncio
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")
pytest.importorskip("torch")
pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "top"))

from docblocks import run_block  # noqa: E402

import tether  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402

#: a short run: one step, evaluated once, few tokens
SHORT = "steps=1, eval_every=1, progress=False, n_runners=4, sampling={'max_tokens': 4}"
TASKS = [f"Pick a letter, round {i}." for i in range(8)]
HELD_OUT = [f"Pick a letter, round {100 + i}." for i in range(2)]


def _pick(task: str) -> str:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return (reply.choices[0].message.content or "").strip()


def _reward(task: str, output: str) -> float:
    return float(output in {"a", "b"})


def _reader(**extra: Any) -> dict[str, Any]:
    """What the pages leave to the reader: an agent, its reward, tasks."""
    return {
        "tether": tether,
        "my_agent": _pick,
        "my_reward": _reward,
        "tasks": TASKS,
        "train_tasks": TASKS,
        "held_out": HELD_OUT,
        "held_out_tasks": HELD_OUT,
        "agent": tether.wrap(_pick, reward=_reward),
        **extra,
    }


def _trained(result: Any) -> list[dict[str, Any]]:
    return [h for h in result.history if h.get("kind") == "train"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # run folders land under runs/ here
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


@pytest.fixture
def teacher() -> Iterator[FakeLLM]:
    """An API teacher that answers right ("a")."""
    with FakeLLM(handler=lambda request: text("a")) as llm:
        yield llm


def test_apo_and_grpo_in_one_run_are_built_as_written(teacher: FakeLLM) -> None:
    ns = run_block("apo.md:1", {"tether": tether}, {'"http://…/v1"': repr(teacher.base_url)})
    algorithm = ns["trainer"].algorithm
    assert isinstance(algorithm["writer"], tether.GRPO) and isinstance(algorithm["checker"], tether.APO)


def test_a_seeded_trainer_is_built_as_written() -> None:
    ns = run_block("reproducibility.md:1", {"tether": tether})
    assert ns["trainer"].seed == 0 and isinstance(ns["trainer"].algorithm, tether.GRPO)


def test_the_wrap_page_trains_an_agent(
    warm_start: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def graph(task: str) -> str:
        with agent_scope("write_query"):
            _pick(task)
        with agent_scope("rewrite_query"):
            return _pick(task)

    monkeypatch.setitem(sys.modules, "my_app", types.SimpleNamespace(graph=graph))
    ns = run_block(
        "wrap.md:1",
        _reader(STUDENT=f"embedded:{warm_start}"),
        {
            'model="embedded"': "model=STUDENT",
            "tether.GRPO(group_size=8)": f"tether.GRPO(group_size=4, tasks_per_step=2), {SHORT}",
        },
    )
    out = capsys.readouterr().out
    assert "write_query" in out and "rewrite_query" in out  # dev's trace names both sub-agents
    assert _trained(ns["result"]) and ns["result"].checkpoint is not None


def test_a_warm_start_then_grpo(teacher: FakeLLM) -> None:
    student = EmbeddedBackend(preset="nano", seed=0)
    ns = run_block(
        "warm-start.md:1",
        _reader(STUDENT=student),
        {
            'model="embedded"': "model=STUDENT",
            '"https://api.openai.com/v1", rollouts=500, min_reward=1.0, epochs=3': (
                f"{teacher.base_url!r}, rollouts=8, min_reward=1.0, epochs=1"
            ),
            "tether.GRPO(group_size=8, tasks_per_step=16)": "tether.GRPO(group_size=2, tasks_per_step=2)",
            "steps=100": SHORT,
        },
    )
    warm = next(h for h in ns["result"].history if h.get("kind") == "warmstart")
    assert warm["kept"] == 8 and warm["teacher_reward"] == 1.0
    assert _trained(ns["result"])


def test_distill_from_a_bigger_checkpoint(warm_start: Path) -> None:
    for name in ("small", "big"):  # the student and the teacher share a tokenizer
        shutil.copytree(warm_start, Path("runs") / name / "checkpoint")
    ns = run_block(
        "distill.md:1",
        _reader(),
        {"group_size=4, tasks_per_step=8": "group_size=2, tasks_per_step=2", "steps=50": SHORT},
    )
    assert ns["result"].checkpoint is not None and _trained(ns["result"])


def test_hf_with_lora(chatml_dir: Path) -> None:
    # a random tiny checkpoint never answers a letter: a reward that varies with what it says
    varied = tether.wrap(_pick, reward=lambda task, output: float(len(output) % 2))
    ns = run_block(
        "gpus.md:1",
        _reader(agent=varied),
        {
            '"hf:/models/Qwen2.5-1.5B-Instruct"': repr(f"hf:{chatml_dir}"),
            "tether.GRPO(group_size=8, lora=tether.LoRA(r=16, alpha=32))": (
                f"tether.GRPO(group_size=2, tasks_per_step=2, lora=tether.LoRA(r=16, alpha=32)), {SHORT}"
            ),
        },
    )
    assert (ns["result"].checkpoint / "adapter_config.json").exists()
    assert ns["trainer"].algorithm.lora.r == 16


async def test_sft_on_a_served_stores_calls() -> None:
    from tether.server import start_server

    def support(task: str) -> str:
        with agent_scope("support_agent"):
            return _pick(task)

    store = tether.open_store("memory:")
    with FakeLLM(handler=lambda request: text("a")) as production:
        async with await start_server(store) as server:
            # the calls to learn from: a support agent's rollouts, stored by a run on the production model
            captured = tether.Trainer(model=production.base_url, store=server.url)
            report = await captured.adev(tether.wrap(support, reward=_reward), TASKS[:4])
            assert report.metrics()["mean_reward"] == 1.0
            ns = await asyncio.to_thread(
                run_block,
                "otel.md:2",
                _reader(my_agent=support, STUDENT=EmbeddedBackend(preset="nano", seed=0)),
                {
                    '"http://127.0.0.1:4747"': repr(server.url),
                    "epochs=3, lr=1e-3, batch_size=16, micro_batch=16": "epochs=1, batch_size=4, micro_batch=4",
                    'model="embedded"': "model=STUDENT",
                    'name="sft"': 'name="sft", progress=False',
                },
            )
    data = ns["result"].history[0]
    assert data["kind"] == "sft_data" and data["examples"] == 4
    assert ns["result"].checkpoint is not None
