"""APO end to end: a plain-OpenAI tool-calling agent whose system prompt lives in resources, a scripted fake
LLM as the agent's model (it answers right only under the better instruction) and another as the optimizer
(it proposes a worse and a better rewrite). Real store (SQLite in the run folder), proxy, runner and redirect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

import tether
from tether.algorithms import apo_prompts
from tether.models.remote import RemoteBackend
from tether.spans import RECORD_METADATA
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, text, tool_call
from tether.types import Mode, PromptTemplate, Rollout, RolloutStatus, Span, SpanKind

# -- the user's agent: knows nothing of tether -------------------------------------------------------------

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
START = "You answer questions about {topic}."
BETTER = "You answer questions about {topic}. Quote the lookup result exactly."
WORSE = "You answer questions about {topic}. Be brief."
FACTS = {
    "capital of Peru": "Lima",
    "largest moon": "Ganymede",
    "tallest peak": "Everest",
    "deepest lake": "Baikal",
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a fact up",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
]


def answer(task: dict[str, Any], system_prompt: str) -> str:
    messages: list[Any] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": task["question"]},
    ]
    for _ in range(3):
        message = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            key = json.loads(call.function.arguments)["key"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"fact: {FACTS[key]}"})
    return "gave up"


def run_with_prompt(agent: Any, task: dict[str, Any], resources: tether.Resources) -> str:
    return agent(task, resources.prompts["system"].format(topic=task["topic"]))


def reward(task: dict[str, Any], output: Any) -> float:
    return float(output == task["answer"])


TASKS = [{"topic": "geography", "question": q, "answer": a} for q, a in FACTS.items()]

# -- scripted models ----------------------------------------------------------------------------------------


def agent_model(request: dict[str, Any]) -> Any:
    """Looks the fact up, then quotes it only when the system prompt says so."""
    messages = request["messages"]
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        return tool_call("lookup", {"key": messages[1]["content"]})
    if "Quote the lookup result exactly" in messages[0]["content"]:
        return text(tool_results[-1]["content"].removeprefix("fact: "))
    return text("It is probably somewhere.")


class Optimizer:
    """Critiques with a fixed text; rewrites from a script (then repeats the last one)."""

    def __init__(self, rewrites: list[str]) -> None:
        self.rewrites = rewrites
        self.critique_requests: list[str] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        system = request["messages"][0]["content"]
        if system == apo_prompts.CRITIC_SYSTEM:
            self.critique_requests.append(request["messages"][1]["content"])
            return text("The agent does not repeat the looked-up fact; tell it to quote the lookup result.")
        reply = self.rewrites.pop(0) if len(self.rewrites) > 1 else self.rewrites[0]
        return text(f"Here it is:\n<prompt>{reply}</prompt>")


async def _fit(tmp_path: Path, optimizer: Optimizer, **apo: Any) -> tuple[Any, FakeLLM]:
    async with FakeLLM(handler=agent_model) as agent_llm, FakeLLM(handler=optimizer) as optimizer_llm:
        algorithm = tether.APO(
            optimizer_model=optimizer_llm.base_url,
            prompts={"system": PromptTemplate(START)},
            **{
                "beam_width": 1,
                "branch_factor": 2,
                "rounds": 2,
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
            wrapped = tether.wrap(answer, reward=reward, run=run_with_prompt)
            result = await trainer.afit(wrapped, train=TASKS, val=TASKS)
        finally:
            await backend.close()
        return result, agent_llm


async def test_beam_keeps_the_better_prompt(tmp_path: Path) -> None:
    optimizer = Optimizer([WORSE, BETTER])
    result, agent_llm = await _fit(tmp_path, optimizer)

    assert result.best_prompts["system"].template == BETTER
    assert result.best_score == 1.0
    scored = {c["prompts"]["system"]["template"]: c["score"] for c in result.candidates if c["status"] == "scored"}
    assert scored == {START: 0.0, WORSE: 0.0, BETTER: 1.0}
    assert [h["score"] for h in result.history] == [0.0, 1.0, 1.0]  # round 0, 1, 2: the best so far
    assert (result.before["greedy_accuracy"], result.after["greedy_accuracy"]) == (0.0, 1.0)

    # multi-turn: every agent rollout made two calls, the second one carrying the tool result
    second_calls = [r for r in agent_llm.chat_requests if any(m["role"] == "tool" for m in r["messages"])]
    assert second_calls and len(second_calls) * 2 == len(agent_llm.chat_requests)
    # the critique saw the whole rollout: the system prompt, both calls, the tool result, output and reward
    # one critique per rewrite in round 1; in round 2 the best prompt failed nowhere: nothing to critique
    assert len(optimizer.critique_requests) == 2
    critique = optimizer.critique_requests[0]
    assert START in critique and "calls lookup" in critique and "[tool] fact: " in critique
    assert '[output] "It is probably somewhere."' in critique and "[reward] 0.0" in critique

    run = tmp_path / "apo"
    assert json.loads((run / "best_prompts.json").read_text())["prompts"]["system"]["template"] == BETTER
    assert (run / "best_prompt_system.txt").read_text().strip() == BETTER
    lines = [json.loads(line) for line in (run / "apo_history.jsonl").read_text().splitlines()]
    assert [(line["candidate"], line["score"]) for line in lines] == [("c0", 0.0), ("c1", 0.0), ("c2", 1.0)]
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3

    # the store keeps the best prompt as the latest resources version and the history as spans
    store = open_store(f"sqlite:///{run / 'store.db'}")
    try:
        latest = await store.get_resources()
        assert latest is not None and latest.prompts["system"].template == BETTER
        (record,) = [
            r for r in await store.list_rollouts(mode=Mode.VAL) if r.metadata.get(RECORD_METADATA) == "apo"
        ]
        assert record.status == RolloutStatus.SUCCEEDED and record.reward == 1.0
        assert record.output["prompts"] == {"system": BETTER}
        (attempt,) = await store.get_attempts(record.rollout_id)
        spans = await store.get_spans(attempt.attempt_id)
        assert [s.attributes["candidate"] for s in spans] == ["c0", "c1", "c2"]
        version = await store.get_resources(spans[2].attributes["resources_version"])
        assert version is not None and version.prompts["system"].template == BETTER
    finally:
        await store.close()


async def test_rewrites_that_change_placeholders_are_rejected(tmp_path: Path) -> None:
    dropped = "Quote the lookup result exactly."  # better instructions, but {topic} is gone
    invented = "About {subject}: quote the lookup result exactly."
    optimizer = Optimizer([dropped, invented, WORSE])
    result, _ = await _fit(tmp_path, optimizer, rounds=1, branch_factor=3, beam_width=2)

    statuses = {c["prompts"]["system"]["template"]: c["status"] for c in result.candidates}
    assert statuses == {START: "scored", dropped: "rejected", invented: "rejected", WORSE: "scored"}
    reasons = [c["reason"] for c in result.candidates if c["status"] == "rejected"]
    assert all("placeholders changed" in r for r in reasons)
    assert result.best_prompts["system"].template == START  # a tie keeps the incumbent
    assert result.history[-1]["beam"] == ["c0", "c3"]


async def test_unknown_template_name_lists_the_templates(tmp_path: Path) -> None:
    optimizer = Optimizer([BETTER])
    with pytest.raises(ValueError, match=r"unknown prompt template 'sytem'.*the templates are: 'system'"):
        await _fit(tmp_path, optimizer, optimize=["sytem"])


async def test_agent_reading_a_missing_template_fails_with_its_error(tmp_path: Path) -> None:
    optimizer = Optimizer([BETTER])
    async with FakeLLM(handler=agent_model) as agent_llm, FakeLLM(handler=optimizer) as optimizer_llm:
        algorithm = tether.APO(optimizer_model=optimizer_llm.base_url, prompts={"persona": START}, rounds=1)
        trainer = tether.Trainer(
            model=agent_llm.base_url, algorithm=algorithm, run_root=str(tmp_path), name="apo", progress=False
        )
        wrapped = tether.wrap(answer, reward=reward, run=run_with_prompt)
        # fit's preflight runs the starting prompts first, and stops on the agent's error
        with pytest.raises(tether.FitError, match=r"8 of 8 rollouts failed: KeyError: 'system'"):
            await trainer.afit(wrapped, train=TASKS)
        with pytest.raises(RuntimeError, match=r"starting prompts failed: KeyError: 'system'"):
            await trainer.afit(wrapped, train=TASKS, preflight=False)


def test_bad_parameters_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"beam_width=...\) must be a positive integer"):
        tether.APO(optimizer_model="http://127.0.0.1:1/v1", prompts={"s": START}, beam_width=0)
    with pytest.raises(ValueError, match="engine must be 'f-string' or 'jinja'"):
        tether.APO(optimizer_model="http://127.0.0.1:1/v1", prompts={"s": PromptTemplate(START, "mustache")})
    with pytest.raises(TypeError, match="optimizer_model must be an OpenAI-compatible URL"):
        tether.APO(optimizer_model=42, prompts={"s": START})  # type: ignore[arg-type]


async def test_templates_come_from_the_store_when_not_given(tmp_path: Path) -> None:
    optimizer = Optimizer([BETTER])
    async with FakeLLM(handler=agent_model) as agent_llm, FakeLLM(handler=optimizer) as optimizer_llm:
        algorithm = tether.APO(optimizer_model=optimizer_llm.base_url, rounds=1, beam_width=1, val_batch_size=4)
        store_url = f"sqlite:///{tmp_path / 'shared.db'}"
        trainer = tether.Trainer(
            model=agent_llm.base_url, algorithm=algorithm, store=store_url, run_root=str(tmp_path), progress=False
        )
        wrapped = tether.wrap(answer, reward=reward, run=run_with_prompt)
        with pytest.raises(ValueError, match=r"store.add_resources\(prompts=...\)"):
            await trainer.afit(wrapped, train=TASKS)
        store = open_store(store_url)
        try:
            await store.add_resources(prompts={"system": PromptTemplate(START)})
        finally:
            await store.close()
        result = await trainer.afit(wrapped, train=TASKS)
    assert result.best_prompts["system"].template == BETTER


# -- the text side --------------------------------------------------------------------------------------------


def test_check_rewrite_and_parse() -> None:
    old = PromptTemplate("Hi {name}, about {topic.title}.")
    assert apo_prompts.check_rewrite(old, "Hello {name}! Topic: {topic.title}") is None
    assert "placeholders changed" in (apo_prompts.check_rewrite(old, "Hello {name}") or "")
    assert "positional" in (apo_prompts.check_rewrite(old, "Hello {} {name} {topic}") or "")
    assert "empty" in (apo_prompts.check_rewrite(old, "  ") or "")
    assert apo_prompts.check_rewrite(old, "Unclosed {name") is not None
    jinja = PromptTemplate("Hi {{ name }}{% if topic %} on {{ topic }}{% endif %}", "jinja")
    assert apo_prompts.check_rewrite(jinja, "{{ name }} / {{ topic }}") is None
    assert "placeholders changed" in (apo_prompts.check_rewrite(jinja, "{{ name }}") or "")
    assert apo_prompts.parse_rewrite("sure:\n<prompt>\nA {x}\n</prompt> done") == "A {x}"
    assert apo_prompts.parse_rewrite("```text\nB {x}\n```") == "B {x}"


def test_trace_shows_every_call_and_tool_result_once() -> None:
    rollout = Rollout("ro-1", input={}, task_id="t", output="Lima", reward=1.0)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "peru"}'}}
    first = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "capital?"}]
    second = [
        *first,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Lima"},
    ]

    def llm(seq: int, messages: list[Any], message: dict[str, Any]) -> Span:
        attrs = {"request": {"messages": messages}, "choices": [{"message": message}]}
        return Span("ro-1", "at-1", SpanKind.LLM, "chat.completions", attributes=attrs, sequence=seq)

    spans = [
        llm(0, first, {"role": "assistant", "tool_calls": [call]}),
        Span(
            "ro-1",
            "at-1",
            SpanKind.TOOL,
            "lookup",
            attributes={"tool.call_id": "c1", "tool.name": "lookup"},
            sequence=1,
        ),
        llm(2, second, {"role": "assistant", "content": "Lima"}),
        Span(
            "ro-1",
            "at-1",
            SpanKind.TOOL,
            "book",
            attributes={"tool.name": "book", "tool.result": "ok"},
            sequence=3,
        ),
    ]
    trace = apo_prompts.render_trace(rollout, spans)
    assert trace.splitlines() == [
        "[system] SYS",
        "[user] capital?",
        '[assistant, call 1] calls lookup({"key": "peru"})',
        "[tool] Lima",
        "[assistant, call 2] Lima",
        "[tool book] arguments null → result: ok",
        '[output] "Lima"',
        "[reward] 1.0",
    ]
