"""How the PostgreSQL store turns new rollouts and spans into rows (``tether.store.postgres``), and turns what
``tether_add_spans`` refused back into the contract's error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether import _json
from tether.store._frozen import frozen_size, snapshot
from tether.store._span_cache import SPAN_BYTES
from tether.store._validate import span_attributes, validate_spec
from tether.store.errors import InvalidInput, InvalidTransition, validate_int, validate_number
from tether.store.postgres._ops import opt_float
from tether.store.postgres._schema import NOT_RUNNING, UNKNOWN_ATTEMPT, WRONG_ROLLOUT
from tether.types import Mode, Rollout, RolloutSpec, Span, SpanKind, new_id

# executemany runs the rows in order, so the queue positions (a column default) follow them
INSERT_ROLLOUTS = (
    "INSERT INTO tether_rollouts (rollout_id, input, task_id, mode, status, metadata, max_attempts, "
    "timeout_s, heartbeat_timeout_s, resources_version, created_at) "
    "VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $8, $9, $10)"
)


def rollout_rows(specs: Sequence[RolloutSpec], now: float) -> tuple[list[Rollout], list[tuple[Any, ...]]]:
    """The queued rollouts ``specs`` become and their rows for ``INSERT_ROLLOUTS`` (each spec validated first,
    numbers included); ``InvalidInput`` for any bad spec."""
    for spec in specs:
        validate_spec(spec)
        validate_int(spec.max_attempts, "max_attempts")
        if spec.resources_version is not None:
            validate_int(spec.resources_version, "resources_version")
        for name in ("timeout_s", "heartbeat_timeout_s"):
            if getattr(spec, name) is not None:
                validate_number(getattr(spec, name), name)
    try:
        blobs = [(_json.dumps(s.input), _json.dumps(s.metadata)) for s in specs]
    except TypeError as exc:
        raise InvalidInput(f"rollout input/metadata: {exc}") from None
    rollouts, rows = [], []
    for spec, (input_blob, meta_blob) in zip(specs, blobs, strict=True):
        rid = new_id("ro")
        r = Rollout(
            rollout_id=rid, input=_json.loads(input_blob), task_id=spec.task_id or rid, mode=Mode(spec.mode),
            metadata=_json.loads(meta_blob), max_attempts=spec.max_attempts,
            timeout_s=opt_float(spec.timeout_s), heartbeat_timeout_s=opt_float(spec.heartbeat_timeout_s),
            resources_version=spec.resources_version, created_at=now,
        )  # fmt: skip
        rollouts.append(r)
        rows.append((rid, input_blob, r.task_id, r.mode.value, meta_blob, r.max_attempts, r.timeout_s,
                     r.heartbeat_timeout_s, r.resources_version, now))  # fmt: skip
    return rollouts, rows


def span_columns(spans: Sequence[Span], cache: bool) -> tuple[list[list[Any]], list[tuple[Span, int]]]:
    """The ten array arguments of ``tether_add_spans`` for ``spans`` and, when ``cache``, each span as the span
    cache keeps it with the memory it holds. ``InvalidInput`` for any bad span."""
    columns: list[list[Any]] = [[] for _ in range(10)]
    cached: list[tuple[Span, int]] = []
    for span in spans:
        attributes = span_attributes(span)
        start = validate_number(span.start_time, f"span {span.name!r} start_time")
        end = None if span.end_time is None else validate_number(span.end_time, f"span {span.name!r} end_time")
        kind = SpanKind(span.kind)
        values = (span.attempt_id, span.rollout_id, span.span_id, kind.value, span.name,
                  span.agent_name, span.parent_id, start, end, attributes)  # fmt: skip
        if cache:  # as a read decodes it: float8 times, the kind as the enum
            frozen = snapshot(span.attributes, attributes)
            cached.append(
                (Span(span.rollout_id, span.attempt_id, kind, span.name, span.agent_name, frozen, span.span_id,
                      span.parent_id, float(start), None if end is None else float(end)),
                 frozen_size(frozen) + SPAN_BYTES)
            )  # fmt: skip
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns, cached


def span_refusal(exc: Any, columns: list[list[Any]]) -> Exception:
    """The contract's error for what ``tether_add_spans`` refused: the first span (in batch order) that names
    an unknown attempt, another rollout's attempt, or one that timed out; anything else as it came."""
    if exc.sqlstate not in (UNKNOWN_ATTEMPT, NOT_RUNNING, WRONG_ROLLOUT):
        unexpected: Exception = exc  # (the transaction's error mapping turns it into a StoreError)
        return unexpected
    i = int(exc.detail) - 1
    aid, rid, name = columns[0][i], columns[1][i], columns[4][i]
    if exc.sqlstate == UNKNOWN_ATTEMPT:
        return InvalidInput(f"span {name!r}: unknown attempt {aid!r}")
    if exc.sqlstate == WRONG_ROLLOUT:
        return InvalidInput(f"span {name!r}: attempt {aid} belongs to rollout {exc.hint}, not {rid}")
    return InvalidTransition(
        f"span {name!r}: attempt {aid} timed out ({exc.hint or 'no reason recorded'}): its worker "
        "was presumed dead and its rollout moved on, so spans of it are refused"
    )
