"""The checks every store backend makes of what it is given, before it changes anything: specs, spans, rewards,
limits and finish statuses; ``InvalidInput`` (or ``InvalidTransition``) naming what is wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether import _json
from tether.store.errors import InvalidInput, InvalidTransition, validate_int, validate_number
from tether.types import AttemptStatus, Mode, RolloutSpec, Span, SpanKind


def validate_limit(limit: Any) -> int | None:
    """A ``list_rollouts`` limit: None (no limit) or an integer >= 0."""
    return None if limit is None else validate_int(limit, "limit (None or an integer >= 0)", 0)


def validate_spec(spec: RolloutSpec) -> None:
    if not isinstance(spec, RolloutSpec):
        raise InvalidInput(f"enqueue takes RolloutSpec objects, got {type(spec).__name__}")
    validate_int(spec.max_attempts, "max_attempts", 1)
    for name in ("timeout_s", "heartbeat_timeout_s"):
        value = getattr(spec, name)
        if value is not None and validate_number(value, name) <= 0:
            raise InvalidInput(f"{name} must be a positive number of seconds, got {value!r}")
    if spec.resources_version is not None:
        validate_int(spec.resources_version, "resources_version")
    try:
        Mode(spec.mode)
    except ValueError:
        raise InvalidInput(f"mode must be 'train' or 'val', got {spec.mode!r}") from None


def validate_reward(reward: Any) -> float | None:
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise InvalidInput(f"reward must be a finite number or None, got {reward!r}")
    return validate_number(reward, "reward")


def validate_span(span: Span) -> None:
    if not isinstance(span, Span):
        raise InvalidInput(f"add_spans takes Span objects, got {type(span).__name__}")
    try:
        SpanKind(span.kind)
    except ValueError:
        raise InvalidInput(f"span kind must be one of {[k.value for k in SpanKind]}, got {span.kind!r}") from None
    if not isinstance(span.name, str) or not span.name:
        raise InvalidInput("span name must be a non-empty string")
    if not isinstance(span.attributes, dict):
        raise InvalidInput(f"span attributes must be a dict, got {type(span.attributes).__name__}")
    validate_number(span.start_time, f"span {span.name!r} start_time")
    if span.end_time is not None:
        validate_number(span.end_time, f"span {span.name!r} end_time")


def span_attributes(span: Span) -> bytes:
    """``validate_span``, then the span's attributes as the stores keep them (JSON bytes); ``InvalidInput`` naming
    the span if they do not encode."""
    validate_span(span)
    try:
        return _json.dumps(span.attributes)
    except TypeError as exc:
        raise InvalidInput(f"span {span.name!r} attributes: {exc}") from None


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt ends: its status, and for its rollout the output (JSON bytes; None when a sweep ends it),
    reward and error. ``validate_ending`` makes one of ``finish_attempt``'s arguments."""

    status: AttemptStatus
    output: bytes | None = None
    reward: float | None = None
    error: str | None = None


def validate_ending(status: AttemptStatus | str, output: Any, reward: Any, error: str | None) -> Ending:
    """``finish_attempt``'s arguments checked (status, then reward, then output) and the output encoded."""
    final = validate_finish_status(status)
    reward = validate_reward(reward)
    try:
        encoded = _json.dumps(output)
    except TypeError as exc:
        raise InvalidInput(f"rollout output: {exc}") from None
    return Ending(final, encoded, reward, error)


def validate_finish_status(status: AttemptStatus | str) -> AttemptStatus:
    try:
        value = AttemptStatus(status)
    except ValueError:
        raise InvalidInput(f"unknown attempt status {status!r}") from None
    if value not in (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED):
        raise InvalidTransition(f"finish_attempt takes 'succeeded' or 'failed', not {value.value!r}")
    return value
