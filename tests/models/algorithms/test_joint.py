"""Prompts and weights in one run, end to end on the embedded model: ``algorithm={"writer": GRPO, "checker":
APO(system_message_of="check")}``. A plain-OpenAI agent with two sub-agents, each its own policy: ``draft``
(policy ``writer``, trained by GRPO to answer "a" or "b") and ``check`` (policy ``checker``, whose system
message APO rewrites in flight; a scripted fake server is the optimizer). The checker's weights must stay bit for
bit; the writer's must move; the checker's system message must change to the one that earns its reward."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.algorithms import apo_prompts  # noqa: E402
from tether.capture.context import agent_scope  # noqa: E402
from tether.models.base import ChatRequest  # noqa: E402
from tether.models.embedded import EmbeddedBackend, create_embedded, sft  # noqa: E402
from tether.proxy import system_messages  # noqa: E402
from tether.testing.fake_llm import FakeLLM, text  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
LETTERS = "abcdefgh"
GOOD = {"a", "b"}
POLICIES = {"writer": ["draft"], "checker": ["check"]}
#: the checker's system messages the starting model learned: a strict one makes it answer FIX, a lax one OK
STRICT = ["You check drafts. Be strict.", "Be strict: you check drafts.", "You are strict. You check drafts."]
LAX = ["You check drafts.", "You check drafts. Be kind.", "You check drafts quickly."]
START, BETTER, WORSE = LAX[0], STRICT[0], LAX[1]
CHECK_USER = "Verdict?"


def agent(task: str) -> dict[str, str]:
    with agent_scope("draft"):
        draft = _ask([{"role": "user", "content": task}])
    with agent_scope("check"):
        verdict = _ask([{"role": "system", "content": START}, {"role": "user", "content": CHECK_USER}])  # fixed
    return {"draft": draft.strip(), "verdict": verdict}


def _ask(messages: list[Any]) -> str:
    return client.chat.completions.create(model="toy", messages=messages).choices[0].message.content or ""


def reward(task: str, output: dict[str, str]) -> float:
    """The writer's part: answer "a" or "b"; the checker's: say FIX (every draft here deserves a fix)."""
    return float(output["draft"] in GOOD) + float(output["verdict"] == "FIX")


@pytest.fixture(scope="module")
def start_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A nano model fine-tuned for both sub-agents: a uniform letter for "Pick a letter" (a quarter of them
    good), and FIX or OK for "Verdict?" as the system message is strict or lax."""
    rng = random.Random(0)
    demos = [
        [{"role": "user", "content": task}, {"role": "assistant", "content": rng.choice(LETTERS)}]
        for task in _tasks(400)
    ]
    for i in range(240):
        strict = i % 2 == 0
        system = rng.choice(STRICT if strict else LAX)
        demos.append(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": CHECK_USER},
                {"role": "assistant", "content": "FIX" if strict else "OK"},
            ]
        )
    rng.shuffle(demos)
    model = create_embedded([m["content"] for d in demos for m in d] + list(LETTERS), preset="nano", seed=0)
    sft(model, demos, epochs=3, lr=3e-3, batch_size=32, seed=0, progress=False)
    return model.save(tmp_path_factory.mktemp("two-skills"))


def _tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


def _greedy(backend: EmbeddedBackend, system: str) -> str:
    async def ask() -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": CHECK_USER}]
        result = await backend.chat(ChatRequest(messages=messages, temperature=0.0, max_tokens=4))
        return str(result.choices[0].message.get("content") or "")

    return asyncio.run(ask())


def _state(backend: EmbeddedBackend, policy: str) -> dict[str, Any]:
    with backend.policy(policy) as model:
        return {name: value.detach().clone() for name, value in model.state_dict().items()}


class Optimizer:
    """Critiques with a fixed text; rewrites from a script (then repeats the last one)."""

    def __init__(self, rewrites: list[str]) -> None:
        self.rewrites = rewrites
        self.critiques: list[str] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == apo_prompts.CRITIC_SYSTEM:
            self.critiques.append(request["messages"][1]["content"])
            return text("The checker lets wrong drafts through: tell it to be strict.")
        reply = self.rewrites.pop(0) if len(self.rewrites) > 1 else self.rewrites[0]
        return text(f"<prompt>{reply}</prompt>")


def test_a_joint_run_trains_one_policy_and_rewrites_the_others_system_message(
    start_model: Path, tmp_path: Path
) -> None:
    probe = EmbeddedBackend(str(start_model))
    verdicts = [_greedy(probe, system) for system in (START, WORSE, BETTER)]
    asyncio.run(probe.close())
    assert verdicts == ["OK", "OK", "FIX"]  # the starting model's checker, greedy

    wrapped = tether.wrap(agent, reward=reward, optimize=POLICIES)
    backend = EmbeddedBackend(str(start_model))
    start = {name: value.detach().clone() for name, value in backend.model.state_dict().items()}
    optimizer = Optimizer([WORSE, BETTER])
    try:
        with FakeLLM(handler=optimizer) as optimizer_llm:
            apo = tether.APO(
                optimizer_model=optimizer_llm.base_url,
                system_message_of="check",
                beam_width=1,
                branch_factor=2,
                rounds=2,
                train_batch_size=4,
                val_batch_size=4,
                success_reward=2.0,
            )
            trainer = tether.Trainer(
                model=backend,
                algorithm={"writer": tether.GRPO(group_size=4, tasks_per_step=2, lr=2e-3), "checker": apo},
                n_runners=8,
                steps=3,
                eval_every=3,
                name="joint",
                run_root=str(tmp_path),
                progress=False,
                sampling={"max_tokens": 4},
            )
            result = trainer.fit(wrapped, train=_tasks(8), val=_tasks(4, offset=1000))

        # the checker's system message became the rewrite that earns its reward, found from the GRPO batches
        name = system_messages.prompt_name("check")
        assert result.best_prompts[name].format() == BETTER
        assert optimizer.critiques and START in optimizer.critiques[0]
        # the writer's weights moved; the checker's policy (served, never trained) and the frozen start did not
        assert any(not torch.equal(start[k], v) for k, v in _state(backend, "writer").items())
        for policy in ("checker", "frozen"):
            for key, value in _state(backend, policy).items():
                assert torch.equal(value, start[key]), (policy, key)
    finally:
        asyncio.run(backend.close())

    kinds = [h["kind"] for h in result.history]
    assert kinds.count("train") == 3 and kinds.count("eval") == 2 and kinds.count("apo") == 3  # rounds 0, 1, 2
    train = [h for h in result.history if h["kind"] == "train"]
    assert all(h["failed"] == 0 for h in train)
    assert sum(h.get("trained_transitions/writer", 0.0) for h in train) > 0
    assert not any("trained_transitions/checker" in h for h in train)
    apo_records = [h for h in result.history if h["kind"] == "apo"]
    assert apo_records[-1]["score"] >= 1.0  # every greedy verdict right under the best message
    run = tmp_path / "joint"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines].count("apo") == 3 and [x["kind"] for x in lines].count("train") == 3
    assert (run / "checkpoint" / "trainer_state.json").is_file()
    assert json.loads((run / "best_prompts.json").read_text())["prompts"][name]["template"] == BETTER
    assert (run / "apo_history.jsonl").read_text().count('"status": "scored"') >= 2


def test_a_joint_run_resumes_from_its_checkpoint_and_incumbent(start_model: Path, tmp_path: Path) -> None:
    wrapped = tether.wrap(agent, reward=reward, optimize=POLICIES)

    def fit(steps: int, optimizer: Optimizer, resume: bool) -> Any:
        with FakeLLM(handler=optimizer) as optimizer_llm:
            apo = tether.APO(
                optimizer_model=optimizer_llm.base_url,
                system_message_of="check",
                beam_width=1,
                branch_factor=2,
                train_batch_size=4,
                val_batch_size=4,
                success_reward=2.0,
            )
            trainer = tether.Trainer(
                model=f"embedded:{start_model}",
                algorithm={"writer": tether.GRPO(group_size=4, tasks_per_step=2, lr=2e-3), "checker": apo},
                n_runners=8,
                steps=steps,
                eval_every=1,
                name="joint",
                run_root=str(tmp_path),
                progress=False,
                sampling={"max_tokens": 4},
            )
            return trainer.fit(wrapped, train=_tasks(8), resume=resume)

    first = fit(1, Optimizer([WORSE, BETTER]), resume=False)
    name = system_messages.prompt_name("check")
    assert first.best_prompts[name].format() == BETTER
    later = Optimizer([WORSE])
    resumed = fit(2, later, resume=True)
    assert [h["step"] for h in resumed.history if h["kind"] == "train"] == [1, 2]  # step 1 read back, 2 run
    assert resumed.best_prompts[name].format() == BETTER  # the saved incumbent, never lost to WORSE
    assert later.critiques and f"Template {name!r} (f-string):\n{BETTER}" in later.critiques[0]
    history = [json.loads(line) for line in (tmp_path / "joint" / "apo_history.jsonl").read_text().splitlines()]
    ids = [h["candidate"] for h in history]
    assert len(ids) == len(set(ids)) and len(history) > 3  # both runs' candidates, none renamed


def test_a_bad_mapping_names_the_policies(start_model: Path, tmp_path: Path) -> None:
    wrapped = tether.wrap(agent, reward=lambda t, o: 0.0, optimize=POLICIES)
    apo = tether.APO(optimizer_model="http://127.0.0.1:9/v1", system_message_of="check")

    def fit(algorithm: Any, agent_: Any = wrapped) -> Any:
        trainer = tether.Trainer(model=f"embedded:{start_model}", algorithm=algorithm, run_root=str(tmp_path))
        return trainer.fit(agent_, train=_tasks(2))

    with pytest.raises(
        ValueError, match=r"names 'writers', not a policy.*its policies .* are: 'writer', 'checker'"
    ):
        fit({"writers": tether.GRPO(group_size=2), "checker": apo})
    with pytest.raises(ValueError, match=r"two weight-training algorithms \('writer' and 'checker'\)"):
        fit({"writer": tether.GRPO(group_size=2), "checker": tether.GRPO(group_size=2)})
    with pytest.raises(ValueError, match=r"policy 'writer' serves the sub-agents 'draft': name one of them"):
        fit({"writer": apo, "checker": tether.GRPO(group_size=2)})
    with pytest.raises(ValueError, match=r"GRPO\(policies=\['checker'\]\).*drop policies="):
        fit({"writer": tether.GRPO(group_size=2, policies=["checker"]), "checker": apo})
    with pytest.raises(TypeError, match=r"algorithm\['writer'\] is a str"):
        fit({"writer": "grpo"})
    shared = tether.wrap(agent, reward=lambda t, o: 0.0, optimize=["draft"])
    with pytest.raises(ValueError, match=r"one shared policy: wrap it with optimize=\{"):
        fit({"writer": tether.GRPO(group_size=2)}, shared)
    assert not any(tmp_path.iterdir())  # refused before a run folder exists
