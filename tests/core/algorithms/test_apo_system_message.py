"""APO on a sub-agent's system message, in flight: a plain-OpenAI agent with two sub-agents (``draft`` and
``check``) that reads no prompt from resources. APO captures ``check``'s system message from a first batch; the
proxy swaps each candidate into ``check``'s calls only; a scripted optimizer proposes a worse and a better
rewrite. Real store (SQLite), proxy, runner and redirect; the agent's model and the optimizer are scripted
fake OpenAI servers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import openai
import pytest

import tether
from tether import spans as schema
from tether.algorithms import apo_prompts
from tether.capture.context import agent_scope
from tether.models.remote import RemoteBackend
from tether.proxy import system_messages
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, text
from tether.types import Mode, PromptTemplate

# -- the user's agent: two sub-agents, fixed system messages, no tether prompts ---------------------------------

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
DRAFT_SYSTEM = "You draft short answers."
CHECK_SYSTEM = 'You check a draft answer. Reply in JSON like {"verdict": "OK"}.'  # braces: kept exactly
ALT_CHECK_SYSTEM = "You check drafts in a hurry."  # a second system message of the same sub-agent
BETTER = 'You check a draft answer against the reference. Reply in JSON like {{"verdict": "OK"}} or FIX.'
WORSE = "You check a draft answer. Be quick."


def agent(task: dict[str, Any]) -> str:
    with agent_scope("draft"):
        draft = _ask(DRAFT_SYSTEM, task["question"])
    system = ALT_CHECK_SYSTEM if task.get("alt") else CHECK_SYSTEM
    with agent_scope("check"):
        return _ask(system, f"question: {task['question']}\ndraft: {draft}\nreference: {task['answer']}")


def _ask(system: str, user: str) -> str:
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return client.chat.completions.create(model="m", messages=messages).choices[0].message.content or ""


def reward(task: dict[str, Any], output: Any) -> float:
    return float(output == task["verdict"])


TASKS = [
    {"question": "2+2", "answer": "4", "verdict": "OK"},
    {"question": "3+3", "answer": "6", "verdict": "FIX"},
    {"question": "4+4", "answer": "8", "verdict": "OK"},
    {"question": "5+5", "answer": "10", "verdict": "FIX"},
]

# -- scripted models ----------------------------------------------------------------------------------------


def agent_model(request: dict[str, Any]) -> Any:
    """Drafts right for 2+2 and 4+4 only; checks right only under a system message about the reference."""
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    if system == DRAFT_SYSTEM:
        return text({"2+2": "4", "4+4": "8"}.get(user, "wrong"))
    if "against the reference" in system:
        fields = dict(line.split(": ", 1) for line in user.splitlines())
        return text("OK" if fields["draft"] == fields["reference"] else "FIX")
    return text("OK")


class Optimizer:
    """Critiques with a fixed text; rewrites from a script (then repeats the last one)."""

    def __init__(self, rewrites: list[str]) -> None:
        self.rewrites = rewrites
        self.critiques: list[str] = []
        self.rewrite_requests: list[str] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == apo_prompts.CRITIC_SYSTEM:
            self.critiques.append(request["messages"][1]["content"])
            return text("The checker never compares the draft with the reference.")
        self.rewrite_requests.append(request["messages"][1]["content"])
        reply = self.rewrites.pop(0) if len(self.rewrites) > 1 else self.rewrites[0]
        return text(f"<prompt>{reply}</prompt>")


async def _fit(tmp_path: Path, tasks: list[dict[str, Any]], **apo: Any) -> tuple[Any, FakeLLM, Optimizer]:
    optimizer = Optimizer([WORSE, BETTER])
    async with FakeLLM(handler=agent_model) as agent_llm, FakeLLM(handler=optimizer) as optimizer_llm:
        algorithm = tether.APO(
            optimizer_model=optimizer_llm.base_url,
            **{
                "system_message_of": "check",
                "beam_width": 1,
                "branch_factor": 2,
                "rounds": 1,
                "train_batch_size": 4,
                "val_batch_size": 4,
                **apo,
            },
        )
        backend = RemoteBackend(agent_llm.base_url)
        try:
            trainer = tether.Trainer(
                model=backend, algorithm=algorithm, run_root=str(tmp_path), name="apo", progress=False
            )
            result = await trainer.afit(tether.wrap(agent, reward=reward), train=tasks, val=tasks)
        finally:
            await backend.close()
    return result, agent_llm, optimizer


async def test_the_candidate_reaches_only_that_sub_agents_calls_and_the_better_one_wins(tmp_path: Path) -> None:
    result, agent_llm, optimizer = await _fit(tmp_path, TASKS)

    name = system_messages.prompt_name("check")
    assert result.best_prompts[name].format() == BETTER.format()
    assert result.best_score == 1.0
    scored = {c["prompts"][name]["template"]: c["score"] for c in result.candidates if c["status"] == "scored"}
    assert scored == {system_messages.escape(CHECK_SYSTEM).template: 0.5, WORSE: 0.5, BETTER: 1.0}

    systems = [(_who(r), r["messages"][0]["content"]) for r in agent_llm.chat_requests]
    check = [s for who, s in systems if who == "check"]
    draft = {s for who, s in systems if who == "draft"}
    assert draft == {DRAFT_SYSTEM}  # the other sub-agent is never touched
    assert BETTER.format() in check and WORSE in check and CHECK_SYSTEM in check  # start, then candidates
    # the optimizer saw the exact captured text as an escaped template, and never the captured copy's name
    assert system_messages.escape(CHECK_SYSTEM).template in optimizer.rewrite_requests[0]
    assert optimizer.critiques[0].count("Template ") == 1  # one template: its rule (the original) is data

    store = open_store(f"sqlite:///{tmp_path / 'apo' / 'store.db'}")
    try:
        latest = await store.get_resources()
        assert latest is not None and latest.prompts[name].format() == BETTER.format()
    finally:
        await store.close()
    best = json.loads((tmp_path / "apo" / "best_prompts.json").read_text())
    assert best["prompts"][name]["template"] == BETTER


async def test_a_different_system_message_of_the_sub_agent_is_left_alone(tmp_path: Path) -> None:
    tasks = [*TASKS, {"question": "6+6", "answer": "12", "verdict": "FIX", "alt": True}]
    with pytest.warns(UserWarning, match="2 different system messages"):
        result, agent_llm, _ = await _fit(tmp_path, tasks, train_batch_size=5, val_batch_size=5)
    assert result.best_prompts[system_messages.prompt_name("check")].format() == BETTER.format()
    alt = [r for r in agent_llm.chat_requests if _who(r) == "check" and "6+6" in r["messages"][1]["content"]]
    assert alt and {r["messages"][0]["content"] for r in alt} == {ALT_CHECK_SYSTEM}


async def test_an_unknown_sub_agent_lists_the_ones_seen(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"no call of sub-agent 'checker'.*the sub-agents seen are: 'check', 'draft'"
    ):
        await _fit(tmp_path, TASKS, system_message_of="checker")


async def test_spans_and_transitions_hold_what_the_model_saw(tmp_path: Path) -> None:
    async with FakeLLM(handler=agent_model) as agent_llm:
        trainer = tether.Trainer(model=agent_llm.base_url, progress=False)
        async with trainer.session(tether.wrap(agent, reward=reward)) as session:
            prompts = system_messages.templates("check", CHECK_SYSTEM)
            name = system_messages.prompt_name("check")
            prompts[name] = dataclasses.replace(prompts[name], template=BETTER)  # a rewrite keeps the rule
            batch = await session.run_batch(TASKS, mode=Mode.VAL, prompts=prompts, harvest=False)
    assert batch.mean_reward == 1.0  # the model answered under the candidate
    for result in batch.results:
        by_agent = {t.agent_name: t for t in result.transitions}
        assert by_agent["check"].messages[0]["content"] == BETTER.format()
        assert by_agent["draft"].messages[0]["content"] == DRAFT_SYSTEM
        (span,) = [s for s in result.spans if schema.SYSTEM_MESSAGE_REPLACED in s.attributes]
        assert span.agent_name == "check"
        assert span.attributes[schema.SYSTEM_MESSAGE_REPLACED] == {
            "prompt": system_messages.prompt_name("check"),
            "messages": [0],
            "original": CHECK_SYSTEM,
        }


def test_system_message_of_excludes_templates() -> None:
    with pytest.raises(ValueError, match="drop prompts= and optimize="):
        tether.APO(optimizer_model="http://127.0.0.1:1/v1", system_message_of="check", prompts={"s": "x"})


def test_replace_is_exact_and_templates_round_trip() -> None:
    prompts = system_messages.templates("check", CHECK_SYSTEM)
    assert system_messages.rule_of(prompts) == {}  # the start replaces nothing
    name = system_messages.prompt_name("check")
    assert system_messages.rule_of({name: PromptTemplate(BETTER)}) == {}  # no rule in its fields: none by name
    prompts[name] = dataclasses.replace(prompts[name], template=BETTER)
    (replacement,) = system_messages.rule_of(prompts).values()
    assert (replacement.original, replacement.text) == (CHECK_SYSTEM, BETTER.format())
    # the rule travels as data through a store's JSON (and the HTTP store's wire)
    assert PromptTemplate.from_dict(prompts[name].to_dict()) == prompts[name]
    assert PromptTemplate(BETTER).to_dict() == {"template": BETTER, "engine": "f-string"}
    parts = [{"type": "text", "text": "You check a draft answer. "}, {"type": "text", "text": CHECK_SYSTEM[26:]}]
    messages = [{"role": "system", "content": parts}, {"role": "user", "content": CHECK_SYSTEM}]
    swapped = system_messages.replace(messages, replacement)
    assert swapped is not None and swapped[1] == [0] and swapped[0][0]["content"] == BETTER.format()
    assert swapped[0][1] == messages[1] and messages[0]["content"] is parts  # the input is not changed
    assert system_messages.replace([{"role": "system", "content": CHECK_SYSTEM + " "}], replacement) is None


def _who(request: dict[str, Any]) -> str:
    """The sub-agent of a request the model got (the backend forwards no tether header: tell by the text)."""
    return "check" if "draft:" in request["messages"][1]["content"] else "draft"


def test_a_joint_mapping_names_the_agents_policies(tmp_path: Path) -> None:
    apo = tether.APO(optimizer_model="http://127.0.0.1:9/v1", system_message_of="check")
    wrapped = tether.wrap(agent, reward=reward, optimize={"drafter": ["draft"], "checker": ["check"]})

    def fit(algorithm: Any, agent_: Any = wrapped) -> Any:
        trainer = tether.Trainer(model="http://127.0.0.1:9/v1", algorithm=algorithm, run_root=str(tmp_path))
        return trainer.fit(agent_, train=TASKS)

    with pytest.raises(ValueError, match=r"names 'checkers', not a policy.* are: 'drafter', 'checker'"):
        fit({"checkers": apo})
    with pytest.raises(ValueError, match=r"policy 'drafter' serves the sub-agents 'draft': name one of them"):
        fit({"drafter": apo})
    with pytest.raises(ValueError, match=r"two APO searches \('drafter' and 'checker'\)"):
        fit({"drafter": tether.APO(optimizer_model="http://127.0.0.1:9/v1"), "checker": apo})
    with pytest.raises(ValueError, match="one shared policy"):
        fit({"checker": apo}, tether.wrap(agent, reward=reward, optimize=["check"]))
    with pytest.raises(ValueError, match="takes policy names to algorithms"):
        tether.Joint({})
    assert not any(tmp_path.iterdir())  # refused before a run folder exists
