"""The company's room directory: offices, their rooms (floor, seats, equipment), and the room search.

Built from fixed seeds, so every run sees the same offices. The booking agent's tools read it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

OFFICES = ["Lisbon", "Oslo", "Quito", "Perth", "Tunis", "Seoul"]
EQUIPMENT = ["projector", "whiteboard", "video"]
FLOORS = [1, 2, 3, 4]


@dataclass(frozen=True)
class Room:
    name: str
    floor: int
    seats: int
    equipment: tuple[str, ...]


def _build_office(office: str) -> list[Room]:
    rng = random.Random(f"office:{office}")
    rooms: list[Room] = []
    for floor in FLOORS:
        for letter in "ABCDE":
            seats = rng.choice([4, 6, 8, 10, 12, 16, 20])
            equipment = tuple(sorted(rng.sample(EQUIPMENT, rng.choice([1, 1, 2]))))
            rooms.append(Room(f"{floor}{letter}", floor, seats, equipment))
    return rooms


ROOMS: dict[str, list[Room]] = {office: _build_office(office) for office in OFFICES}


def find_rooms(office: str, floor: int, seats: int, equipment: str, limit: int = 3) -> list[Room]:
    """Rooms of ``office`` on ``floor`` with at least ``seats`` seats and the equipment, smallest first."""
    found = [r for r in ROOMS[office] if r.floor == floor and r.seats >= seats and equipment in r.equipment]
    return sorted(found, key=lambda r: (r.seats, r.name))[:limit]
