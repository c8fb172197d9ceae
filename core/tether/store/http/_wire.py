"""The HTTP store's wire format: JSON error bodies and the checks that turn request JSON into tether records.

Records go out as JSON straight from their dataclasses (orjson serialises them natively, the same shape as
``to_dict``). Coming in, the server checks each field's JSON type before building a record, so a malformed
request fails with ``InvalidInput`` naming the field instead of failing somewhere inside a backend.
"""

from __future__ import annotations

from typing import Any

from tether.store.base import ImportedRollout
from tether.store.errors import InvalidInput, InvalidTransition, NotFound, StoreError
from tether.types import LLMEndpoint, Mode, PromptTemplate, RolloutSpec, RolloutStatus, Span, SpanKind

# error type name on the wire -> (exception class, HTTP status)
ERRORS: dict[str, tuple[type[StoreError], int]] = {
    "NotFound": (NotFound, 404),
    "InvalidTransition": (InvalidTransition, 409),
    "InvalidInput": (InvalidInput, 400),
    "StoreError": (StoreError, 500),
}

_NUMBER = (int, float)
_STR_OR_NONE = (str, type(None))
_NUM_OR_NONE = (int, float, type(None))
_INT_OR_NONE = (int, type(None))
_ANY = (object,)

# field -> (accepted JSON types, required). Unknown fields are ignored (a newer client may send more).
_Schema = dict[str, tuple[tuple[type, ...], bool]]

_SPAN_FIELDS: _Schema = {
    "rollout_id": ((str,), True),
    "attempt_id": ((str,), True),
    "kind": ((str,), True),
    "name": ((str,), True),
    "agent_name": (_STR_OR_NONE, False),
    "attributes": ((dict,), False),
    "span_id": ((str,), False),
    "parent_id": (_STR_OR_NONE, False),
    "start_time": (_NUMBER, False),
    "end_time": (_NUM_OR_NONE, False),
    "sequence": (_INT_OR_NONE, False),
}
_SPEC_FIELDS: _Schema = {
    "input": (_ANY, True),
    "task_id": (_STR_OR_NONE, False),
    "mode": ((str,), False),
    "metadata": ((dict,), False),
    "max_attempts": ((int,), False),
    "timeout_s": (_NUM_OR_NONE, False),
    "heartbeat_timeout_s": (_NUM_OR_NONE, False),
    "resources_version": (_INT_OR_NONE, False),
}
_IMPORT_FIELDS: _Schema = {
    "key": ((str,), True),
    "input": (_ANY, False),
    "output": (_ANY, False),
    "error": (_STR_OR_NONE, False),
    "mode": ((str,), False),
    "metadata": ((dict,), False),
    "spans": ((list,), False),
    "worker_id": ((str,), False),
}
_LLM_FIELDS: _Schema = {
    "base_url": ((str,), True),
    "model": ((str,), False),
    "sampling": ((dict,), False),
}
_PROMPT_FIELDS: _Schema = {
    "template": ((str,), True),
    "engine": ((str,), False),
    "system_message_of": ((str, type(None)), False),
    "replaces": ((str, type(None)), False),
}


def error_type(exc: BaseException) -> str:
    for name, (cls, _) in ERRORS.items():
        if type(exc) is cls:
            return name
    for name, (cls, _) in ERRORS.items():  # subclasses a backend may define
        if isinstance(exc, cls):
            return name
    return "InternalError"


def _fields(data: Any, what: str, schema: _Schema) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {_json_type(data)}")
    out = {}
    for name, (types, required) in schema.items():
        if name not in data:
            if required:
                raise InvalidInput(f"{what} is missing the field {name!r}")
            continue
        value = data[name]
        if types is not _ANY and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            wanted = " or ".join("null" if t is type(None) else _TYPE_NAMES.get(t, t.__name__) for t in types)
            raise InvalidInput(f"{what}: field {name!r} must be {wanted}, got {_json_type(value)}")
        out[name] = value
    return out


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "an array"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def body_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput(f"request body must be a JSON object, got {_json_type(data)}")
    return data


def get_field(body: dict[str, Any], name: str, types: tuple[type, ...], default: Any = ..., what: str = "") -> Any:
    """``body[name]`` checked against ``types``; required when no default is given."""
    if name not in body:
        if default is ...:
            raise InvalidInput(f"{what or 'request body'} is missing the field {name!r}")
        return default
    return _fields(body, what or "request body", {name: (types, True)})[name]


def str_list(body: dict[str, Any], name: str, *, required: bool = False) -> list[str] | None:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidInput(f"request body is missing the field {name!r} (an array of ids)")
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"field {name!r} must be an array of strings, got {_json_type(value)}")
    return value


def _objects(data: Any, field: str, what: tuple[str, str], schema: _Schema) -> list[dict[str, Any]]:
    """The fields of each object of the array ``data`` (the body's field ``field``), each checked against
    ``schema``; ``what``: how errors name the array's items, and one of them."""
    if not isinstance(data, list):
        raise InvalidInput(f"field {field!r} must be an array of {what[0]}, got {_json_type(data)}")
    return [_fields(item, f"{what[1]} #{i}", schema) for i, item in enumerate(data)]


def spans_from_wire(data: Any) -> list[Span]:
    out = []
    for fields in _objects(data, "spans", ("span objects", "span"), _SPAN_FIELDS):
        try:
            fields["kind"] = SpanKind(fields["kind"])
        except ValueError:
            raise InvalidInput(
                f"span kind must be one of {[k.value for k in SpanKind]}, got {fields['kind']!r}"
            ) from None
        out.append(Span(**fields))
    return out


def import_from_wire(data: Any) -> ImportedRollout:
    fields = _fields(data, "field 'rollout'", _IMPORT_FIELDS)
    if "mode" in fields:
        fields["mode"] = mode_from_wire(fields["mode"])
    if "spans" in fields:
        fields["spans"] = spans_from_wire(fields["spans"])
    return ImportedRollout(**fields)


def specs_from_wire(data: Any) -> list[RolloutSpec]:
    out = []
    for fields in _objects(data, "specs", ("rollout specs", "rollout spec"), _SPEC_FIELDS):
        if "mode" in fields:
            fields["mode"] = mode_from_wire(fields["mode"])
        out.append(RolloutSpec(**fields))
    return out


def mode_from_wire(value: Any) -> Mode:
    try:
        return Mode(value)
    except ValueError:
        raise InvalidInput(f"mode must be 'train' or 'val', got {value!r}") from None


def rollout_status_from_wire(value: Any) -> RolloutStatus:
    try:
        return RolloutStatus(value)
    except ValueError:
        raise InvalidInput(f"status must be one of {[s.value for s in RolloutStatus]}, got {value!r}") from None


def llm_from_wire(data: Any) -> LLMEndpoint | None:
    if data is None:
        return None
    return LLMEndpoint(**_fields(data, "field 'llm'", _LLM_FIELDS))


def prompts_from_wire(data: Any) -> dict[str, PromptTemplate] | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InvalidInput(f"field 'prompts' must be an object of prompt templates, got {_json_type(data)}")
    return {
        str(name): PromptTemplate(**_fields(value, f"prompt {name!r}", _PROMPT_FIELDS))
        for name, value in data.items()
    }
