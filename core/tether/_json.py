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


def jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-safe deep copy of ``value`` (for span attributes and stored outputs): itself when serialisable;
    else containers are converted item by item, pydantic models (framework messages) by ``model_dump``, and
    anything else becomes its text."""
    try:
        return clone(value)
    except TypeError:
        pass
    if _depth > 20:
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, _depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(mode="json"), _depth + 1)
        except Exception:
            pass
    return str(value)
