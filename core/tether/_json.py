"""Fast JSON for the wire and the store (orjson), with one clear error for what cannot be serialised."""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Serialise to JSON bytes; ``TypeError`` names what could not be serialised."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"not JSON-serialisable: {exc}") from None


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def clone(value: Any) -> Any:
    """A deep copy through JSON: checks serialisability and detaches the value from the caller's objects."""
    return orjson.loads(dumps(value))
