"""The in-process store's ``import_rollout`` (``tether.store.memory``): the item is checked and copied before
the store's lock is taken, then written under it."""

from __future__ import annotations

import time
from typing import Any, Protocol

from tether import _json
from tether.store._frozen import snapshot
from tether.store.base import ImportedRollout, ImportResult, import_id, validate_import
from tether.store.errors import InvalidInput
from tether.types import Attempt, AttemptStatus, Mode, Rollout, RolloutStatus, Span, SpanKind


class _Tables(Protocol):
    """What ``write`` uses of a ``tether.store.memory.MemoryStore`` (named so, not imported: no import circle)."""

    _rollouts: dict[str, Rollout]
    _attempts: dict[str, Attempt]
    _attempts_of: dict[str, list[str]]
    _spans: dict[str, list[Span]]

    def _add(self, rollout_id: str, rollout: Rollout) -> None: ...

    def _finish(self, rollout_id: str) -> None: ...


Prepared = tuple[Any, Any, Any, list[tuple[Span, Any]]]  # what ``prepare`` returns


def prepare(item: ImportedRollout) -> Prepared:
    """Copies of the item's input, output and metadata, and each span with its frozen attributes;
    ``InvalidInput`` for anything that is not JSON."""
    spans = validate_import(item)
    try:
        task_input, output, meta = (_json.clone(v) for v in (item.input, item.output, item.metadata))
    except TypeError as exc:
        raise InvalidInput(f"imported rollout input/output/metadata: {exc}") from None
    prepared = []
    for span in spans:
        try:
            prepared.append((span, snapshot(span.attributes, _json.dumps(span.attributes))))
        except TypeError as exc:
            raise InvalidInput(f"span {span.name!r} attributes: {exc}") from None
    return task_input, output, meta, prepared


def write(store: _Tables, item: ImportedRollout, prepared: Prepared) -> ImportResult:
    """Write what ``prepare`` made into ``store`` (its lock held): a new finished rollout, or the spans it does
    not hold yet added to the one imported under the same key."""
    task_input, output, meta, spans = prepared
    rollout_id, attempt_id = import_id(item.key)
    now = time.time()
    rollout = store._rollouts.get(rollout_id)
    created = rollout is None
    if rollout is None:
        rollout = Rollout(
            rollout_id=rollout_id, input=task_input, task_id=rollout_id, mode=Mode(item.mode),
            metadata=meta, status=RolloutStatus.SUCCEEDED, attempt_count=1, created_at=now,
            finished_at=now, output=output,
        )  # fmt: skip
        attempt = Attempt(
            attempt_id=attempt_id, rollout_id=rollout_id, index=1, worker_id=item.worker_id,
            status=AttemptStatus.SUCCEEDED, started_at=now, last_heartbeat_at=now, finished_at=now,
        )  # fmt: skip
        store._add(rollout_id, rollout)
        store._attempts[attempt_id] = attempt
        store._attempts_of[rollout_id] = [attempt_id]
        store._spans[attempt_id] = []
        store._finish(rollout_id)  # an imported rollout is finished: it counts in the window
    else:
        if rollout.input is None:
            rollout.input = task_input
        if output is not None:
            rollout.output = output
    if item.error is not None:
        rollout.status, rollout.error = RolloutStatus.FAILED, item.error
        attempt = store._attempts[attempt_id]
        attempt.status, attempt.error = AttemptStatus.FAILED, item.error
    stored = store._spans[attempt_id]
    held = {s.span_id for s in stored}
    added = 0
    for span, attributes in spans:
        if span.span_id in held:
            continue
        stored.append(
            Span(rollout_id, attempt_id, SpanKind(span.kind), span.name, span.agent_name, attributes,
                 span.span_id, span.parent_id, span.start_time, span.end_time, len(stored))
        )  # fmt: skip
        added += 1
    return ImportResult(rollout_id, attempt_id, created, added)
