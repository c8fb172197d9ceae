"""``tether.Distill`` on the embedded model: a student learns a teacher's preference from the teacher's logprobs of
the student's own tokens, with no reward used.

The teacher is the session's warm start (``warm_start``: one letter, uniformly) fine-tuned further to answer
only "a" or "b"; the student starts from the warm start itself, so both share a tokenizer. The agent's reward
("a" or "b" is right) is recorded and evaluated but never reaches the update. Seeded runs on two CPU cores; the
held-out bar (64 tasks at temperature 1: a binomial standard error of at most 0.0625) sits far above noise.
Refusals: a teacher with another tokenizer (before any rollout), an OpenAI-compatible URL (when Distill is
built).
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")
torch = pytest.importorskip("torch")

import tether  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.models.embedded import EmbeddedModel, sft  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
GOOD = {"a", "b"}
VAL = [f"Pick a letter, round {1000 + i}." for i in range(64)]


def _tasks(n: int) -> list[str]:
    return [f"Pick a letter, round {i}." for i in range(n)]


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return (reply.choices[0].message.content or "").strip()


def reward(task: str, output: str) -> float:
    return float(output in GOOD)


@pytest.fixture(scope="module")
def ab_teacher(warm_start: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warm start fine-tuned to answer "a" or "b" (its tokenizer kept): a checkpoint directory."""
    rng = random.Random(1)
    demos = [
        [{"role": "user", "content": task}, {"role": "assistant", "content": rng.choice(sorted(GOOD))}]
        for task in _tasks(200)
    ]
    model = EmbeddedModel.load(warm_start)
    sft(model, demos, epochs=2, lr=3e-3, batch_size=32, seed=0, progress=False)
    return model.save(tmp_path_factory.mktemp("ab-teacher"))


def _trainer(student: str, algorithm: Any, run_root: Path, steps: int) -> tether.Trainer:
    return tether.Trainer(
        model=student,
        algorithm=algorithm,
        n_runners=8,
        steps=steps,
        eval_every=steps,
        seed=0,
        name="distill",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
    )


def test_distill_moves_the_student_to_its_teacher(warm_start: Path, ab_teacher: Path, tmp_path: Path) -> None:
    algorithm = tether.Distill(teacher=f"embedded:{ab_teacher}", group_size=4, tasks_per_step=8, lr=2e-3)
    agent = tether.wrap(pick_letter, reward=reward)
    trainer = _trainer(f"embedded:{warm_start}", algorithm, tmp_path, steps=16)
    result = trainer.fit(agent, train=_tasks(32), val=VAL)
    train = [h for h in result.history if h["kind"] == "train"]
    assert len(train) == 16 and all(h["trained"] == 32 and h["failed"] == 0 for h in train)
    # every step says what the teacher did: tokens scored (each reply's), the time it took, the reverse KL
    assert all(h["teacher_tokens"] == h["response_tokens"] > 0 and h["teacher_s"] > 0 for h in train)
    kl = [h["reverse_kl"] for h in train]
    print("reverse_kl:", [round(k, 3) for k in kl])  # (shown with pytest -rP)
    assert kl[0] > 0.5 and sum(kl[-2:]) / 2 < kl[0] / 2, kl
    before, after = result.before, result.after
    assert before is not None and after is not None
    print(f"sampled_accuracy: {before['sampled_accuracy']:.3f} -> {after['sampled_accuracy']:.3f}")
    assert after["sampled_accuracy"] - before["sampled_accuracy"] > 0.3, (before, after)
    # the reward is recorded on every step, never trained on: the steps' own reward rose with the student
    assert sum(h["reward"] for h in train[-2:]) / 2 > sum(h["reward"] for h in train[:2]) / 2


def test_a_lora_student_learns_without_a_reward(warm_start: Path, ab_teacher: Path, tmp_path: Path) -> None:
    """No reward function at all (preflight does not ask for one), LoRA adapters on the student."""
    layers = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    lora = tether.LoRA(r=8, alpha=16, target_modules=layers)
    teacher = f"embedded:{ab_teacher}"
    algorithm = tether.Distill(teacher=teacher, group_size=4, tasks_per_step=8, lr=3e-3, lora=lora)
    result = _trainer(f"embedded:{warm_start}", algorithm, tmp_path, steps=6).fit(
        tether.wrap(pick_letter), train=_tasks(32)
    )
    kl = [h["reverse_kl"] for h in result.history if h["kind"] == "train"]
    print("reverse_kl:", [round(k, 3) for k in kl])
    assert len(kl) == 6 and kl[-1] < kl[0] * 0.75, kl
    assert result.checkpoint is not None and (result.checkpoint / "adapter_config.json").exists()


def test_each_policy_distills_on_its_own_weights(warm_start: Path, ab_teacher: Path, tmp_path: Path) -> None:
    """``optimize={policy: [...]}``: one update per policy; the teacher's metrics per policy and summed."""

    def two_pickers(task: str) -> dict[str, str]:
        out = {}
        for name in ("first", "second"):
            with agent_scope(name):
                out[name] = pick_letter(task)
        return out

    agent = tether.wrap(two_pickers, optimize={"one": ["first"], "two": ["second"]})
    algorithm = tether.Distill(teacher=f"embedded:{ab_teacher}", group_size=2, tasks_per_step=4, lr=2e-3)
    result = _trainer(f"embedded:{warm_start}", algorithm, tmp_path, steps=1).fit(agent, train=_tasks(8))
    (step,) = [h for h in result.history if h["kind"] == "train"]
    assert step["teacher_tokens/one"] > 0 and step["teacher_tokens/two"] > 0
    assert step["teacher_tokens"] == step["teacher_tokens/one"] + step["teacher_tokens/two"]
    assert step["reverse_kl/one"] > 0 and step["reverse_kl/two"] > 0
    manifest = json.loads((result.checkpoint / "policies.json").read_text()) if result.checkpoint else {}
    assert set(manifest.get("policies", manifest)) >= {"one", "two"}, manifest


def test_a_teacher_with_another_tokenizer_is_refused_before_any_rollout(
    warm_start: Path, nano_dir: Path, tmp_path: Path
) -> None:
    algorithm = tether.Distill(teacher=f"embedded:{nano_dir}")  # (its own tokenizer, fitted to other text)
    with pytest.raises(ValueError, match=r"Distill cannot use this teacher: the teacher .* has another tokenizer"):
        _trainer(f"embedded:{warm_start}", algorithm, tmp_path, steps=1).fit(
            tether.wrap(pick_letter, reward=reward), train=_tasks(4)
        )
    store = tmp_path / "distill" / "store.db"
    if store.exists():  # (the session opened its store; no rollout was run: not even the preflight's)
        with sqlite3.connect(store) as db:
            assert db.execute("SELECT count(*) FROM rollouts").fetchone()[0] == 0


def test_an_api_teacher_is_refused_when_distill_is_built() -> None:
    with pytest.raises(ValueError, match="an OpenAI-compatible API returns logprobs of its own samples only"):
        tether.Distill(teacher="http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="fresh model with random weights"):
        tether.Distill(teacher="embedded")
    with pytest.raises(ValueError, match="Distill needs a teacher"):
        tether.Distill()


def test_distill_runs_after_a_warm_start_in_one_run(warm_start: Path, ab_teacher: Path, tmp_path: Path) -> None:
    """``algorithm=[WarmStart, Distill]``: one history, the Distill stage's steps following the warm start's."""
    from tether.testing.fake_llm import FakeLLM, text

    with FakeLLM(handler=lambda request: text("c")) as demonstrator:
        algorithm = [
            tether.WarmStart(teacher=demonstrator.base_url, rollouts=16, min_reward=0.0, epochs=1, batch_size=16),
            tether.Distill(teacher=f"embedded:{ab_teacher}", group_size=2, tasks_per_step=4, lr=2e-3),
        ]
        result = _trainer(f"embedded:{warm_start}", algorithm, tmp_path, steps=2).fit(
            tether.wrap(pick_letter, reward=reward), train=_tasks(16)
        )
    stages = [(h.get("stage"), h["kind"]) for h in result.history if h["kind"] in ("sft", "train")]
    assert stages[0] == ("warmstart", "sft") and stages[-2:] == [("distill", "train")] * 2, stages
    train = [h for h in result.history if h["kind"] == "train"]
    assert all(h["teacher_tokens"] > 0 and h["reverse_kl"] > 0 for h in train)
