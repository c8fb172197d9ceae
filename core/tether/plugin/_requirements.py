"""TEMPORARY local stub (honest): main lacks this module."""

from typing import Any


def unmet(dist: Any, extra: str) -> list[str]:
    return []
