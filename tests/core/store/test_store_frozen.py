"""Frozen span attributes (``tether.store._frozen``): what a thaw gives back is what JSON would, fresh."""

from __future__ import annotations

import enum
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from tether import _json
from tether.store._frozen import NotNative, freeze_copy, snapshot, thaw

_NATIVE = [
    {},
    [],
    {"ids": list(range(300)), "logprobs": [-0.5, -1.25, 0.0], "flags": [True, False, 1]},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": None, "x": [1, "a"]}]},
    {"deep": [[[1, 2], []], [{"a": {"b": [None, "s", 2.5]}}], "tail"]},
    [1, "a", None, 2.5, True],
    {"huge": [1e308, 1e308], "big": 2**63 - 1, "neg": -(2**63)},  # the sum overflows: checked one by one
]


@pytest.mark.parametrize("value", _NATIVE)
def test_thaw_gives_back_an_equal_fresh_value(value: Any) -> None:
    frozen = freeze_copy(value)
    first, second = thaw(frozen), thaw(frozen)
    assert first == value == second
    assert _json.dumps(first) == _json.dumps(value)
    _assert_no_shared_containers(first, value)
    _assert_no_shared_containers(first, second)


def _assert_no_shared_containers(a: Any, b: Any) -> None:
    if isinstance(a, dict | list):
        assert a is not b
        items = zip(a.values(), b.values(), strict=True) if isinstance(a, dict) else zip(a, b, strict=True)
        for x, y in items:
            _assert_no_shared_containers(x, y)


class _Color(enum.Enum):
    RED = "red"


class _Text(enum.StrEnum):  # a str to isinstance, not to the freeze's type tests
    A = "a"


class _Number(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key"},
        {"x": math.nan},
        [1, math.inf],
        [1, Decimal("2.5")],
        [Fraction(1, 2)],
        {"c": _Color.RED},
        (1, ("a", {2: 3})),
        {"s": {"a"}},
        ["a", math.nan],
        [{"x": [1, "a", math.inf]}],
        {"t": _Text.A},
        ["ok", _Text.A],
        {"b": True, "n": _Number.ONE},
        [{"deep": {"n": -math.inf}}],
    ],
)
def test_values_json_would_change_are_not_copied(value: Any) -> None:
    with pytest.raises(NotNative):
        freeze_copy(value)


@pytest.mark.parametrize(
    "value",
    [{1: "int key", "t": (1, 2)}, {"x": math.nan, "ids": [1, 2]}, {"c": _Color.RED}, [(1, "a"), {"n": None}]],
)
def test_snapshot_is_what_json_gives_back(value: Any) -> None:
    encoded = _json.dumps(value)
    assert thaw(snapshot(value, encoded)) == _json.loads(encoded)
