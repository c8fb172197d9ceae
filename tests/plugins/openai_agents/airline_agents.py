"""Airline customer-service agents in the shape of the OpenAI Agents SDK's ``customer_service`` example (no
tether import): a typed run context (``Agent[AirlineContext]``) that a handoff hook and a tool write to, a
triage agent handing off to an FAQ agent and a seat-booking agent, and tools answering from fixed data."""

from __future__ import annotations

import random

from agents import Agent, RunContextWrapper, function_tool, handoff
from pydantic import BaseModel


class AirlineContext(BaseModel):
    passenger_name: str | None = None
    confirmation_number: str | None = None
    seat_number: str | None = None
    flight_number: str | None = None


@function_tool(name_override="faq_lookup_tool", description_override="Look up frequently asked questions.")
async def faq_lookup_tool(question: str) -> str:
    if "bag" in question:
        return "One bag, under 50 pounds and 22 x 14 x 9 inches."
    if "wifi" in question:
        return "Free wifi on board: join Airline-Wifi."
    return "I'm sorry, I don't know the answer to that question."


@function_tool
async def update_seat(context: RunContextWrapper[AirlineContext], confirmation_number: str, new_seat: str) -> str:
    """Update the seat for a confirmation number.

    Args:
        confirmation_number: The confirmation number of the booking.
        new_seat: The seat to move to.
    """
    context.context.confirmation_number = confirmation_number
    context.context.seat_number = new_seat
    assert context.context.flight_number is not None, "the flight number is set by the handoff"
    return f"Seat {new_seat} booked on {context.context.flight_number} for {confirmation_number}"


async def on_seat_booking_handoff(context: RunContextWrapper[AirlineContext]) -> None:
    context.context.flight_number = f"FLT-{random.randint(100, 999)}"


faq_agent = Agent[AirlineContext](
    name="FAQ Agent",
    handoff_description="Answers questions about the airline.",
    instructions="You are an FAQ agent. Answer the customer's last question with the FAQ lookup tool.",
    tools=[faq_lookup_tool],
)
seat_booking_agent = Agent[AirlineContext](
    name="Seat Booking Agent",
    handoff_description="Updates a seat on a flight.",
    instructions="You are a seat booking agent. Update the seat with the update seat tool.",
    tools=[update_seat],
)
triage_agent = Agent[AirlineContext](
    name="Triage Agent",
    handoff_description="Delegates a customer's request to the right agent.",
    instructions="You are a triage agent. Delegate the customer's question to the right agent.",
    handoffs=[faq_agent, handoff(agent=seat_booking_agent, on_handoff=on_seat_booking_handoff)],
)
faq_agent.handoffs.append(triage_agent)
seat_booking_agent.handoffs.append(triage_agent)
