"""An agent with a typed run context (the SDK's ``customer_service`` example's shape) runs through tether's
default run: each rollout gets a fresh context of the declared type, so the handoff hook and the tool that
write to it work; when the context cannot be built, the error says what the agent needs."""

from __future__ import annotations

import re
from typing import Any

import airline_agents
from agents import Agent, RunContextWrapper, function_tool

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind

TASKS = ["How heavy may my bag be?", "Is there wifi?", "Please move booking ABC123 to seat 14C"]


def _model(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content") or "")
    question = next(str(m["content"]) for m in messages if m.get("role") == "user")
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if system.startswith("You are a triage agent"):
        seat = "seat" in question
        return tool_call("transfer_to_seat_booking_agent" if seat else "transfer_to_faq_agent", {})
    if len(results) >= 2:  # the handoff's result, then the specialist's own
        return text(results[-1])
    if system.startswith("You are an FAQ agent"):
        return tool_call("faq_lookup_tool", {"question": question})
    if system.startswith("You are a seat booking agent"):
        booking = re.search(r"booking (\w+) to seat (\w+)", question)
        assert booking is not None
        return tool_call("update_seat", {"confirmation_number": booking[1], "new_seat": booking[2]})
    return text("?")


def _reward(task: str, output: Any) -> float:
    return float(("14C" in str(output)) if "seat" in task else ("sorry" not in str(output)))


async def _dev(agent: Any, tasks: list[str]) -> Any:
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend).adev(agent, tasks)
        finally:
            await backend.close()


async def test_the_default_run_gives_each_rollout_the_declared_context() -> None:
    report = await _dev(tether.wrap(airline_agents.triage_agent, reward=_reward), TASKS)
    by_task = {r.rollout.input: r for r in report.rollouts}
    for task in TASKS:
        assert by_task[task].status == RolloutStatus.SUCCEEDED, by_task[task].error
        assert by_task[task].reward == 1.0, by_task[task].output
    seat = by_task[TASKS[2]]
    (tool,) = [s for s in seat.spans if s.kind == SpanKind.TOOL and s.name == "update_seat"]
    assert re.fullmatch(r"Seat 14C booked on FLT-\d{3} for ABC123", tool.attributes[spans.TOOL_RESULT])
    assert [t.agent_name for t in seat.transitions] == ["Triage Agent", "Seat Booking Agent", "Seat Booking Agent"]


class Booking:
    """A context that needs its booking to be built."""

    def __init__(self, confirmation_number: str) -> None:
        self.confirmation_number = confirmation_number
        self.seat: str | None = None


@function_tool
def move_seat(context: RunContextWrapper[Booking], new_seat: str) -> str:
    """Move the booking to a seat."""
    context.context.seat = new_seat
    return f"{context.context.confirmation_number}: {new_seat}"


async def _needs_booking(wrapper: RunContextWrapper[Booking]) -> None:
    wrapper.context.seat = None


async def test_a_context_that_cannot_be_built_names_the_fix() -> None:
    from agents import handoff

    desk = Agent[Booking](name="desk", instructions="You are a seat booking agent.", tools=[move_seat])
    front = Agent[Booking](
        name="front",
        instructions="You are a triage agent.",
        handoffs=[
            handoff(agent=desk, tool_name_override="transfer_to_seat_booking_agent", on_handoff=_needs_booking)
        ],
    )
    report = await _dev(tether.wrap(front), [TASKS[2]])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.FAILED
    error = rollout.error or ""
    assert "declares a run context of type Booking" in error and "run=lambda agent, task" in error, error


async def test_an_untyped_agent_reading_a_missing_context_names_the_fix() -> None:
    from agents import handoff

    desk = Agent(name="desk", instructions="You are a seat booking agent.", tools=[move_seat])
    front = Agent(
        name="front",
        instructions="You are a triage agent.",
        handoffs=[
            handoff(agent=desk, tool_name_override="transfer_to_seat_booking_agent", on_handoff=_needs_booking)
        ],
    )
    report = await _dev(tether.wrap(front), [TASKS[2]])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.FAILED
    error = rollout.error or ""
    assert "Agent[MyContext]" in error and "context=MyContext" in error, error
