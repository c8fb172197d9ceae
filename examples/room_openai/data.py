"""Meeting-room requests for the room-booking agent, their right answers, and imperfect demonstrations.

Each office has a fixed set of rooms (floor, seats, equipment) built from a fixed seed. A request names a floor
and a head count directly, but the equipment only through what the meeting is for ("to show slides" needs a
projector, "for a brainstorm" a whiteboard, "with the remote team" video). The right room is the one the
office's ``find_rooms`` lists first for the right floor, seats and equipment: the smallest room that fits.
Splits use different seeds and never share a request text.

Demonstrations (for the warm start) follow the right two-step format — ``find_rooms`` then ``book_room`` on
the first room listed — but read the meeting's need right only part of the time, confusing it the same way
each time (slides → video, remote → whiteboard, brainstorm → projector): an imitator learns the format and
the confusion, and only reward can teach it which equipment a need calls for.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from offices import OFFICES, ROOMS, find_rooms

NEEDS: dict[str, list[str]] = {
    "projector": ["to show slides", "for a presentation", "to demo the product on a big screen"],
    "whiteboard": ["for a brainstorm", "to sketch a design", "to draw diagrams"],
    "video": ["for a call with the remote team", "for a video meeting", "to meet a client online"],
}
NAMES = ["Ann", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jo", "Kai", "Lea", "Max", "Nia", "Oto"]
TEMPLATES = [
    "{name} needs a room on floor {floor} for {seats} people {need}.",
    "Book a room for {seats} people on floor {floor} {need}.",
    "We are {seats} and want a room on floor {floor} {need}.",
    "Find us a room on floor {floor}, {seats} people, {need}.",
]

#: the equipment a careless demonstrator picks instead of the right one
CONFUSED = {"projector": "video", "video": "whiteboard", "whiteboard": "projector"}


@dataclass(frozen=True)
class Request:
    office: str
    text: str
    floor: int
    seats: int
    equipment: str

    @property
    def room(self) -> str:
        """The right room: the first that ``find_rooms`` lists for the request's true needs."""
        return find_rooms(self.office, self.floor, self.seats, self.equipment)[0].name

    def task(self) -> dict[str, Any]:
        return {"office": self.office, "request": self.text, "room": self.room}


def _request(rng: random.Random) -> Request:
    office = rng.choice(OFFICES)
    while True:
        target = rng.choice(ROOMS[office])
        equipment = rng.choice(target.equipment)
        seats = rng.randint(2, target.seats)
        if find_rooms(office, target.floor, seats, equipment):
            break
    text = rng.choice(TEMPLATES).format(
        name=rng.choice(NAMES), floor=target.floor, seats=seats, need=rng.choice(NEEDS[equipment])
    )
    return Request(office, text, target.floor, seats, equipment)


def splits(n_train: int = 400, n_val: int = 64, n_test: int = 100, seed: int = 0) -> dict[str, list[Request]]:
    """Train / val / test requests from fixed seeds; no (office, request text) appears in two splits."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, list[Request]] = {}
    for offset, (name, size) in enumerate((("train", n_train), ("val", n_val), ("test", n_test))):
        rng = random.Random(f"{seed}:{offset}")
        requests: list[Request] = []
        while len(requests) < size:
            request = _request(rng)
            key = (request.office, request.text)
            if key not in seen:
                seen.add(key)
                requests.append(request)
        out[name] = requests
    return out


def demonstration_call(request: Request, rng: random.Random, p_correct: float) -> dict[str, Any]:
    """The ``find_rooms`` arguments a careless demonstrator writes: floor and seats right, the equipment right
    with probability ``p_correct`` and otherwise its usual confusion (when that finds any room at all)."""
    equipment = request.equipment
    if rng.random() >= p_correct and find_rooms(request.office, request.floor, request.seats, CONFUSED[equipment]):
        equipment = CONFUSED[equipment]
    return {"floor": request.floor, "seats": request.seats, "equipment": equipment}


def reward(task: dict[str, Any], output: Any) -> float:
    """1 if the agent booked the right room, else 0."""
    booked = output.get("room") if isinstance(output, dict) else None
    return float(booked is not None and booked == task["room"])
