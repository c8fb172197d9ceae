"""The room_openai example: its request generator and reward, its demonstrations, and the unchanged agent
function running through tether (multi-turn tool loop, prompt taken from resources) against the fake LLM."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from example_modules import example_modules

import tether
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, text, tool_call


@pytest.fixture(scope="module")
def room() -> Iterator[dict[str, ModuleType]]:
    """The example's modules, imported from its folder as its scripts do (``import data``), then taken out of
    ``sys.modules`` again so that other examples' ``data`` / ``agent`` modules are not confused with them."""
    with example_modules("room_openai", "offices", "data", "agent", "train") as modules:
        yield modules


def test_splits_are_fixed_disjoint_and_answerable(room: dict[str, ModuleType]) -> None:
    data, offices = room["data"], room["offices"]
    first, again = data.splits(seed=3), data.splits(seed=3)
    assert {k: len(v) for k, v in first.items()} == {"train": 400, "val": 64, "test": 100}
    assert first == again and data.splits(seed=4)["test"] != first["test"]
    keys = [{(r.office, r.text) for r in first[split]} for split in ("train", "val", "test")]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    for request in first["test"]:
        gold = next(r for r in offices.ROOMS[request.office] if r.name == request.room)
        assert gold.floor == request.floor and gold.seats >= request.seats and request.equipment in gold.equipment
        assert f"floor {request.floor}" in request.text and str(request.seats) in request.text
        assert any(need in request.text for need in data.NEEDS[request.equipment])
        smaller = offices.find_rooms(request.office, request.floor, request.seats, request.equipment)
        assert smaller[0].name == request.room  # the smallest room that fits


def test_reward_is_one_only_for_the_right_room(room: dict[str, ModuleType]) -> None:
    data = room["data"]
    task = data.splits(n_train=1, n_val=0, n_test=0)["train"][0].task()
    assert data.reward(task, {"room": task["room"], "reply": "booked"}) == 1.0
    assert data.reward(task, {"room": "9Z", "reply": "booked"}) == 0.0
    assert data.reward(task, {"room": None, "reply": "no room"}) == 0.0
    assert data.reward(task, f"booked {task['room']}") == 0.0  # the booking is what counts, not the text


def test_demonstrations_confuse_the_equipment_only(room: dict[str, ModuleType]) -> None:
    data = room["data"]
    requests = data.splits(n_train=200, n_val=0, n_test=0)["train"]
    rng = random.Random(0)
    calls = [data.demonstration_call(r, rng, 0.4) for r in requests]
    assert all((c["floor"], c["seats"]) == (r.floor, r.seats) for c, r in zip(calls, requests, strict=True))
    confused = sum(c["equipment"] == data.CONFUSED[r.equipment] for c, r in zip(calls, requests, strict=True))
    assert 0.4 < confused / len(requests) < 0.7


async def test_the_scripted_teacher_books_through_the_agent_often_wrongly(room: dict[str, ModuleType]) -> None:
    """The warm start's teacher (a stand-in for an API model): the agent's two calls, the right room about
    40% of the time."""
    data, train, agent = room["data"], room["train"], room["agent"]
    requests = data.splits(n_train=60, n_val=0, n_test=0)["train"]
    async with train.scripted_teacher(agent, requests, 0.4, seed=0) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            wrapped = tether.wrap(
                agent.book_meeting, reward=data.reward, run=train.prompt_runner(agent.SYSTEM_PROMPT)
            )
            report = await tether.Trainer(model=backend, progress=False, n_runners=8).adev(
                wrapped, [r.task() for r in requests]
            )
        finally:
            await backend.close()
    assert 0.3 < report.metrics()["mean_reward"] < 0.8
    first = report.rollouts[0]
    assert [len(t.messages) for t in first.transitions] == [2, 4]  # find_rooms, then book_room
    assert first.transitions[0].messages[0]["content"] == agent.SYSTEM_PROMPT.format(office=requests[0].office)


def _fake_room_model(data: ModuleType) -> Any:
    """Books the right room when the system prompt maps needs to equipment, else always asks for video."""

    def handler(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        if results:
            return tool_call("book_room", {"room": json.loads(results[-1]["content"])[0]["room"]})
        ask = messages[1]["content"]
        need = next(e for e, phrases in data.NEEDS.items() if any(p in ask for p in phrases))
        equipment = need if "slides mean projector" in messages[0]["content"] else "video"
        floor, seats = _numbers(ask)
        if not data.find_rooms(_office(messages[0]["content"]), floor, seats, equipment):
            return text("No room fits.")
        return tool_call("find_rooms", {"floor": floor, "seats": seats, "equipment": equipment})

    return handler


def _numbers(ask: str) -> tuple[int, int]:
    floor = re.search(r"floor (\d+)", ask)
    seats = re.search(r"(\d+) people|We are (\d+)", ask)
    assert floor is not None and seats is not None, ask
    return int(floor.group(1)), int(seats.group(1) or seats.group(2))


def _office(system: str) -> str:
    return system.split(" the ")[1].split(" office")[0]


async def test_agent_books_through_tether_with_the_prompt_from_resources(room: dict[str, ModuleType]) -> None:
    data, agent, train = room["data"], room["agent"], room["train"]
    tasks = [r.task() for r in data.splits(n_train=12, n_val=0, n_test=0)["train"]]
    better = agent.SYSTEM_PROMPT + " Needs: slides mean projector, sketching whiteboard, remote calls video."
    async with FakeLLM(handler=_fake_room_model(data)) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(model=backend, progress=False)
            plain = tether.wrap(
                agent.book_meeting, reward=data.reward, run=train.prompt_runner(agent.SYSTEM_PROMPT)
            )
            tuned = tether.wrap(agent.book_meeting, reward=data.reward, run=train.prompt_runner(better))
            before = await trainer.adev(plain, tasks)
            sent_before = len(llm.chat_requests)
            after = await trainer.adev(tuned, tasks)
        finally:
            await backend.close()
    rewards = [r.rollout.reward for r in after.rollouts]
    assert rewards == [1.0] * len(tasks)
    assert before.metrics()["mean_reward"] < 1.0
    first = after.rollouts[0]
    assert len(first.transitions) == 2  # find_rooms, then book_room after seeing the result
    assert first.transitions[1].messages[-1]["role"] == "tool"
    # run= feeds the task, yet the calls are named after the agent function and its tool results are spans
    assert {t.agent_name for t in first.transitions} == {"book_meeting"}
    tools = [s.attributes["tool.name"] for s in first.spans if s.kind == tether.SpanKind.TOOL]
    assert tools == ["find_rooms"]
    assert first.rollout.output["room"] == tasks[0]["room"]
    tuned_systems = {r["messages"][0]["content"] for r in llm.chat_requests[sent_before:]}
    assert tuned_systems == {better.format(office=office) for office in {t["office"] for t in tasks}}


def test_train_script_warm_starts_and_trains_a_grpo_step(
    room: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train.py`` end to end on a tiny budget: warm start from the scripted teacher, one GRPO step, the table.
    Needs torch: runs in the ``embedded`` tox env (``core`` has no torch)."""
    pytest.importorskip("torch")
    train = room["train"]
    argv = ["--run-dir", str(tmp_path), "--preset", "nano", "--n-train", "16", "--n-val", "0", "--n-test", "4"]
    argv += ["--sft-epochs", "1", "--steps", "1", "--eval-every", "1", "--tasks-per-step", "2"]
    # a 1-epoch warm start of the nano model may score 0 on every preflight rollout, which fit would rightly stop
    argv += ["--group-size", "2", "--runners", "4", "--no-preflight"]
    assert train.main(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (teacher,) = [r for r in records if r["kind"] == "warmstart"]
    assert teacher["teacher_rollouts"] == teacher["kept"] == 16 and 0.0 < teacher["teacher_reward"] <= 1.0
    sft_steps = [r["step"] for r in records if r["kind"] == "sft"]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, sft_steps[-1], sft_steps[-1] + 1]
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["rollouts"] == 4 and step["failed"] == 0
    out = capsys.readouterr().out
    assert "held-out requests: 4 (never trained on)" in out and "right room booked (greedy)" in out
