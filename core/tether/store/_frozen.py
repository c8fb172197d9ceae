"""Private snapshots of JSON values: frozen once when a store takes them, thawed cheaply on every read.

A store must not share its span attributes with callers (a caller mutating what it got back, or what it
stored, must not change the store), so each read used to deep-copy them through JSON. For an LLM span that
copy is mostly the creation of hundreds of token-id ``int`` objects, and it made reading spans the slowest
store operation. A frozen value instead keeps a list of scalars as a tuple, an object of scalars as a dict,
any other object as a ``FrozenObject`` that knows which of its keys hold containers, and any other list as a
list of frozen values; thawing it builds fresh dicts and lists but shares the immutable leaves (ints,
floats, strings), so a 640-token span thaws in a few microseconds. No frozen value is ever handed out.

``freeze_copy`` snapshots the caller's value when it holds only JSON-native types, in the form JSON would
give back; anything else (a tuple key, a NaN, a numpy array, an enum) raises ``NotNative`` and the store
freezes ``loads(dumps(value))`` instead, exactly what the other backends would return.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from tether import _json
from tether.types import Span

__all__ = ["FrozenObject", "NotNative", "freeze_copy", "frozen_size", "snapshot", "thaw", "thawed_span"]


class NotNative(Exception):
    """The value holds something JSON would change (a non-string key, a non-finite float, a foreign type)."""


class FrozenObject:
    """A frozen JSON object: ``items`` (values frozen) and the keys whose values are containers."""

    __slots__ = ("items", "nested")

    def __init__(self, items: dict[str, Any], nested: tuple[str, ...]) -> None:
        self.items = items
        self.nested = nested


_SCALARS = frozenset({str, int, float, bool, type(None)})
_NUMBERS = frozenset({int, float, bool})


def thaw(value: Any) -> Any:
    """A fresh, mutable JSON value (dicts and lists) equal to the one frozen; leaves are shared."""
    kind = type(value)
    if kind is FrozenObject:
        out = value.items.copy()
        for key in value.nested:
            item = out[key]
            kind = type(item)
            if kind is tuple:
                out[key] = list(item)
            elif kind is dict:
                out[key] = item.copy()
            else:
                out[key] = thaw(item)
        return out
    if kind is tuple:  # a list of scalars
        return list(value)
    if kind is dict:  # an object of scalars
        return value.copy()
    if kind is list:  # a list holding containers
        return [item.copy() if type(item) is dict else thaw(item) for item in value]
    return value


def thawed_span(span: Span) -> Span:
    """A caller's copy of a stored span whose attributes are frozen."""
    return Span(span.rollout_id, span.attempt_id, span.kind, span.name, span.agent_name, thaw(span.attributes),
                span.span_id, span.parent_id, span.start_time, span.end_time, span.sequence)  # fmt: skip


def snapshot(value: Any, encoded: bytes) -> Any:
    """The frozen form of ``value`` as its JSON text ``encoded`` decodes: a copy of ``value`` when it is
    JSON-native (the fast path), else frozen from ``encoded``."""
    try:
        return freeze_copy(value)
    except NotNative:
        return freeze_copy(_json.loads(encoded))


def freeze_copy(value: Any) -> Any:
    """A frozen copy of ``value`` that shares nothing mutable with it; ``NotNative`` if JSON would change it."""
    kind = type(value)
    if kind is dict:
        return _freeze_object(value)
    if kind is list or kind is tuple:
        return _freeze_list(value)
    if kind in _SCALARS:
        if kind is float and not math.isfinite(value):
            raise NotNative(value)
        return value
    raise NotNative(kind.__name__)


def _freeze_object(value: dict[Any, Any]) -> Any:
    # (the proxy records a span per model call: this walk is most of a memory or SQLite store's write, so its
    # common cases are tested inline, without a call per value)
    items: dict[str, Any] = {}
    nested: list[str] = []
    for key, item in value.items():
        if type(key) is not str:
            raise NotNative(key)
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            items[key] = item
        elif kind is dict:
            items[key] = _freeze_object(item)
            nested.append(key)  # a frozen object is a FrozenObject or a dict: a container either way
        elif kind is list or kind is tuple:
            items[key] = _freeze_list(item)
            nested.append(key)  # a frozen list is a tuple or a list
        elif kind is float:
            if not math.isfinite(item):
                raise NotNative(item)
            items[key] = item
        else:
            raise NotNative(kind.__name__)
    return FrozenObject(items, tuple(nested)) if nested else items


def _freeze_list(value: list[Any] | tuple[Any, ...]) -> Any:
    if _all_numbers(value):
        return tuple(value)
    items: list[Any] = []
    nested = False
    for item in value:
        kind = type(item)
        if kind is dict:
            items.append(_freeze_object(item))
            nested = True
        elif kind is list or kind is tuple:
            items.append(_freeze_list(item))
            nested = True
        elif kind is str or kind is int or kind is bool or item is None:
            items.append(item)
        elif kind is float:
            if not math.isfinite(item):
                raise NotNative(item)
            items.append(item)
        else:
            raise NotNative(kind.__name__)
    return items if nested else tuple(items)


def _all_numbers(items: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every item is a plain finite int, float or bool, checked at C speed: ``sum`` refuses
    strings, None and containers, and a numpy scalar, Decimal or Fraction anywhere makes the total one."""
    if items and type(items[0]) not in _NUMBERS:  # (an exception from sum costs more than this check)
        return False
    try:
        total = sum(items)
    except TypeError:
        return False
    kind = type(total)
    return kind is int or (kind is float and math.isfinite(total))


# what a number in a frozen list costs: its 8-byte slot and the int object (28 bytes, 32 as allocated; a
# float's is 24). Ints -5..256 are shared by CPython, but counting them too keeps the estimate an upper bound.
_NUMBER_BYTES = 8 + 32
_getsizeof = sys.getsizeof


def frozen_size(value: Any) -> int:
    """About how many bytes of memory a frozen value holds (its containers, strings and numbers), counted
    without visiting each number of a list of numbers. A cache bounds this, not the value's JSON, which is
    several times smaller than its Python objects (a token id: ~6 bytes of JSON, 40 bytes in a tuple)."""
    kind = type(value)
    if kind is str:
        return _getsizeof(value)
    if kind is tuple:  # a list of scalars: all numbers (token ids, the common case), or mixed
        if value and (type(value[0]) in _NUMBERS and type(value[-1]) in _NUMBERS):
            return 40 + len(value) * _NUMBER_BYTES
        return _getsizeof(value) + sum(_scalar_size(item) for item in value)
    if kind is FrozenObject:
        return 64 + frozen_size(value.items) + _getsizeof(value.nested)
    if kind is dict:
        total: int = _getsizeof(value)
        for key, item in value.items():
            total += _getsizeof(key) + frozen_size(item)
        return total
    if kind is list:
        return _getsizeof(value) + sum(frozen_size(item) for item in value)
    return _scalar_size(value)


def _scalar_size(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return _getsizeof(value)
    return 32 if kind is int else 24 if kind is float else 0  # bool and None are shared singletons
