"""In-process store (``memory:``): dicts behind a lock. Fast, and gone when the process exits.

Span attributes are kept frozen (``tether.store._frozen``): a read thaws a fresh copy that shares only the
immutable leaves, so neither the writer nor a reader can change what the store holds, and reading a span costs
a few microseconds instead of a JSON round trip.

A long run's memory stays flat: the store keeps the latest ``keep_rollouts`` finished rollouts (10,000 by
default; ``memory:?keep_rollouts=N``), dropping the oldest finished one (with its attempts and spans) as each
new one finishes. Queued and running rollouts are never dropped; ``keep_rollouts=None`` keeps everything.

``import_rollout``'s work is in ``tether.store.memory._import``; the rule for when a running attempt is dead
(``stale_reason``), shared by every backend, is in ``tether.store._stale``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether import _json
from tether.store._frozen import snapshot, thawed_span
from tether.store._stale import stale_reason, timed_out_span
from tether.store._validate import Ending, span_attributes, validate_spec
from tether.store.base import FINISHED_ATTEMPT_STATUSES, Harvested, ImportedRollout, ImportResult, Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound, validate_int, validate_number
from tether.store.memory._import import prepare as prepare_import
from tether.store.memory._import import write as write_import
from tether.store.rollout_query import RolloutPage, RolloutQuery, VersionUsage, counts_of, page_of, usage_from
from tether.types import Attempt, AttemptStatus, Mode, Resources, Rollout, RolloutStatus, Span, SpanKind, new_id

if TYPE_CHECKING:
    from tether.types import LLMEndpoint, PromptTemplate, RolloutSpec

DEFAULT_KEEP_ROLLOUTS = 10_000


class MemoryStore(Store):
    def __init__(self, *, keep_rollouts: int | None = DEFAULT_KEEP_ROLLOUTS) -> None:
        if keep_rollouts is not None and (
            isinstance(keep_rollouts, bool) or not isinstance(keep_rollouts, int) or keep_rollouts < 1
        ):
            raise ValueError(f"keep_rollouts must be an int >= 1 or None, got {keep_rollouts!r}")
        self.keep_rollouts = keep_rollouts
        self._finished: OrderedDict[str, None] = OrderedDict()  # finished rollout ids, oldest first
        self._lock = threading.Lock()
        self._rollouts: dict[str, Rollout] = {}
        self._positions: dict[str, int] = {}  # rollout id -> the order it was added in (a page cursor's key)
        self._added = 0
        self._queue: OrderedDict[str, None] = OrderedDict()  # queued rollout ids, oldest first
        self._attempts: dict[str, Attempt] = {}
        self._attempts_of: dict[str, list[str]] = {}
        self._spans: dict[str, list[Span]] = {}
        self._resources: list[Resources] = []

    # -- rollouts -----------------------------------------------------------------------------------------

    async def enqueue(self, specs: Sequence[RolloutSpec]) -> list[Rollout]:
        for spec in specs:
            validate_spec(spec)
        try:
            inputs = [_json.clone(spec.input) for spec in specs]
            metas = [_json.clone(spec.metadata) for spec in specs]
        except TypeError as exc:
            raise InvalidInput(f"rollout input/metadata: {exc}") from None
        out = []
        with self._lock:
            for spec, task_input, meta in zip(specs, inputs, metas, strict=True):
                rid = new_id("ro")
                rollout = Rollout(
                    rollout_id=rid,
                    input=task_input,
                    task_id=spec.task_id or rid,
                    mode=Mode(spec.mode),
                    metadata=meta,
                    max_attempts=spec.max_attempts,
                    timeout_s=spec.timeout_s,
                    heartbeat_timeout_s=spec.heartbeat_timeout_s,
                    resources_version=spec.resources_version,
                )
                self._add(rid, rollout)
                self._attempts_of[rid] = []
                self._queue[rid] = None
                out.append(_copy_rollout(rollout))
        return out

    async def _dequeue(self, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
        out: list[tuple[Rollout, Attempt]] = []
        with self._lock:
            while self._queue and len(out) < limit:
                rid, _ = self._queue.popitem(last=False)
                rollout = self._rollouts[rid]
                rollout.status = RolloutStatus.RUNNING
                rollout.attempt_count += 1
                attempt = Attempt(
                    attempt_id=new_id("at"), rollout_id=rid, index=rollout.attempt_count, worker_id=worker_id
                )
                self._attempts[attempt.attempt_id] = attempt
                self._attempts_of[rid].append(attempt.attempt_id)
                self._spans[attempt.attempt_id] = []
                out.append((_copy_rollout(rollout), _copy_attempt(attempt)))
        return out

    async def _finish_attempt(self, attempt_id: str, ending: Ending) -> Rollout:
        output = None if ending.output is None else _json.loads(ending.output)
        with self._lock:
            attempt = self._running_attempt(attempt_id)
            rollout = self._rollouts[attempt.rollout_id]
            self._end_attempt(attempt, rollout, ending, output)
            return _copy_rollout(rollout)

    async def heartbeat(self, attempt_id: str) -> None:
        with self._lock:
            self._running_attempt(attempt_id).last_heartbeat_at = time.time()

    async def requeue_stale(self, now: float | None = None) -> list[str]:
        now = time.time() if now is None else validate_number(now, "now")
        affected = []
        with self._lock:
            for attempt in list(self._attempts.values()):
                if attempt.status != AttemptStatus.RUNNING:
                    continue
                rollout = self._rollouts[attempt.rollout_id]
                reason = stale_reason(rollout, attempt, now)
                if reason:
                    self._end_attempt(attempt, rollout, Ending(AttemptStatus.TIMEOUT, error=reason))
                    affected.append(rollout.rollout_id)
        return affected

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        with self._lock:
            rollout = self._get(rollout_id)
            if rollout.status.finished:
                raise InvalidTransition(f"rollout {rollout_id} is already {rollout.status.value}")
            for aid in self._attempts_of[rollout_id]:
                attempt = self._attempts[aid]
                if attempt.status == AttemptStatus.RUNNING:
                    attempt.status = AttemptStatus.CANCELLED
                    attempt.finished_at = time.time()
            self._queue.pop(rollout_id, None)
            rollout.status = RolloutStatus.CANCELLED
            rollout.finished_at = time.time()
            self._finish(rollout_id)
            return _copy_rollout(rollout)

    async def get_rollout(self, rollout_id: str) -> Rollout:
        with self._lock:
            return _copy_rollout(self._get(rollout_id))

    async def _list_rollouts(
        self, status: RolloutStatus | None, mode: Mode | None, rollout_ids: list[str] | None, limit: int | None
    ) -> list[Rollout]:
        with self._lock:
            if rollout_ids is not None:
                pool = [self._rollouts[r] for r in dict.fromkeys(rollout_ids) if r in self._rollouts]
                pool.sort(key=lambda r: r.created_at)
            else:
                pool = list(self._rollouts.values())
            out = []
            for rollout in pool:
                if status is not None and rollout.status != status:
                    continue
                if mode is not None and rollout.mode != mode:
                    continue
                out.append(_copy_rollout(rollout))
                if limit is not None and len(out) >= limit:
                    break
            return out

    async def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        with self._lock:
            page = page_of(query, [(self._positions[rid], r) for rid, r in self._rollouts.items()])
            page.rollouts = [_copy_rollout(r) for r in page.rollouts]
            return page

    async def count_rollouts(self, *, mode: Mode | None = None) -> dict[str, int]:
        with self._lock:
            return counts_of(self._rollouts.values(), None if mode is None else Mode(mode))

    async def usage_by_version(self) -> dict[int, VersionUsage]:
        with self._lock:
            return usage_from(self._rollouts.values())

    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        with self._lock:
            self._get(rollout_id)
            return [_copy_attempt(self._attempts[a]) for a in self._attempts_of[rollout_id]]

    # -- spans --------------------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        prepared = []
        for span in spans:
            encoded = span_attributes(span)  # checks the span first
            prepared.append((span, snapshot(span.attributes, encoded)))
        with self._lock:
            for span, _ in prepared:
                attempt = self._attempts.get(span.attempt_id)
                if attempt is None:
                    raise InvalidInput(f"span {span.name!r} names unknown attempt {span.attempt_id!r}")
                if attempt.rollout_id != span.rollout_id:
                    raise InvalidInput(
                        f"span {span.name!r}: attempt {span.attempt_id} belongs to rollout "
                        f"{attempt.rollout_id}, not {span.rollout_id}"
                    )
                if attempt.status == AttemptStatus.TIMEOUT:
                    raise InvalidTransition(timed_out_span(span.name, attempt.attempt_id, attempt.error))
            now = time.time()
            sequences: list[int] = []
            for span, attributes in prepared:
                stored = self._spans[span.attempt_id]
                sequence = len(stored)
                stored.append(
                    Span(span.rollout_id, span.attempt_id, SpanKind(span.kind), span.name, span.agent_name,
                         attributes, span.span_id, span.parent_id, span.start_time, span.end_time, sequence)
                )  # fmt: skip
                sequences.append(sequence)
                attempt = self._attempts[span.attempt_id]
                if attempt.status == AttemptStatus.RUNNING:
                    attempt.last_heartbeat_at = now
            return sequences

    async def get_spans(self, attempt_id: str, *, since: int = 0) -> list[Span]:
        validate_int(since, "since")
        with self._lock:
            stored = self._spans.get(attempt_id)
            if stored is None:
                raise NotFound(f"unknown attempt {attempt_id!r}")
            picked = stored[max(since, 0) :]  # the stored spans never change: thaw them outside the lock
        return [thawed_span(s) for s in picked]

    # -- imports ------------------------------------------------------------------------------------------

    async def import_rollout(self, item: ImportedRollout) -> ImportResult:
        prepared = prepare_import(item)  # checked and copied before the lock is taken
        with self._lock:
            return write_import(self, item, prepared)

    # -- resources ----------------------------------------------------------------------------------------

    async def add_resources(
        self, *, llm: LLMEndpoint | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> Resources:
        with self._lock:
            latest = self._resources[-1] if self._resources else None
            resources = Resources(
                version=len(self._resources) + 1,
                llm=llm if llm is not None else (latest.llm if latest else None),
                prompts=dict(prompts) if prompts is not None else (dict(latest.prompts) if latest else {}),
            )
            resources = Resources.from_dict(_json.clone(resources.to_dict()))
            self._resources.append(resources)
            return Resources.from_dict(resources.to_dict())

    async def get_resources(self, version: int | None = None) -> Resources | None:
        if version is not None:
            validate_int(version, "version")
        with self._lock:
            if version is None:
                return Resources.from_dict(self._resources[-1].to_dict()) if self._resources else None
            if not 1 <= version <= len(self._resources):
                raise NotFound(f"unknown resources version {version}")
            return Resources.from_dict(self._resources[version - 1].to_dict())

    # -- memory -------------------------------------------------------------------------------------------

    async def harvest(self, rollout_ids: Sequence[str] | None = None) -> list[Harvested]:
        with self._lock:
            if rollout_ids is None:
                ids = [r.rollout_id for r in self._rollouts.values() if r.status.finished]
            else:
                ids = list(dict.fromkeys(rollout_ids))
                for rid in ids:
                    rollout = self._get(rid)
                    if not rollout.status.finished:
                        raise InvalidTransition(
                            f"rollout {rid} is {rollout.status.value}; only finished rollouts can be harvested"
                        )
            out = []
            for rid in ids:
                rollout = self._rollouts.pop(rid)
                self._positions.pop(rid, None)
                self._finished.pop(rid, None)
                attempt_ids = self._attempts_of.pop(rid)
                attempts = [self._attempts.pop(a) for a in attempt_ids]
                spans = [thawed_span(s) for a in attempt_ids for s in self._spans.pop(a)]
                out.append(Harvested(rollout=rollout, attempts=attempts, spans=spans))
            return out

    # -- helpers ------------------------------------------------------------------------------------------

    def _get(self, rollout_id: str) -> Rollout:
        rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            raise NotFound(f"unknown rollout {rollout_id!r}")
        return rollout

    def _running_attempt(self, attempt_id: str) -> Attempt:
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            raise NotFound(f"unknown attempt {attempt_id!r}")
        if attempt.status in FINISHED_ATTEMPT_STATUSES:
            raise InvalidTransition(f"attempt {attempt_id} is already {attempt.status.value}")
        return attempt

    def _end_attempt(self, attempt: Attempt, rollout: Rollout, ending: Ending, output: Any = None) -> None:
        """End ``attempt`` as ``ending`` says (``output``: its output decoded); settle ``rollout`` (lock held)."""
        now, status, error, reward = time.time(), ending.status, ending.error, ending.reward
        attempt.status = status
        attempt.finished_at = now
        attempt.error = error
        if status == AttemptStatus.SUCCEEDED:
            rollout.status = RolloutStatus.SUCCEEDED
            rollout.output, rollout.reward, rollout.error = output, reward, None
            rollout.finished_at = now
            self._finish(rollout.rollout_id)
        elif rollout.attempt_count < rollout.max_attempts:
            rollout.status = RolloutStatus.QUEUED
            rollout.error = error
            self._queue[rollout.rollout_id] = None
        else:
            rollout.status = RolloutStatus.FAILED
            rollout.output, rollout.reward, rollout.error = output, reward, error
            rollout.finished_at = now
            self._finish(rollout.rollout_id)

    def _add(self, rollout_id: str, rollout: Rollout) -> None:
        """Hold a new rollout, after every other in page order (lock held)."""
        self._rollouts[rollout_id] = rollout
        self._positions[rollout_id] = self._added
        self._added += 1

    def _finish(self, rollout_id: str) -> None:
        """Count a rollout as finished and drop the oldest finished ones past ``keep_rollouts`` (lock held)."""
        self._finished[rollout_id] = None
        while self.keep_rollouts is not None and len(self._finished) > self.keep_rollouts:
            old, _ = self._finished.popitem(last=False)
            self._rollouts.pop(old, None)
            self._positions.pop(old, None)
            for attempt_id in self._attempts_of.pop(old, []):
                self._attempts.pop(attempt_id, None)
                self._spans.pop(attempt_id, None)


def _copy_rollout(r: Rollout) -> Rollout:
    return Rollout.from_dict(r.to_dict())


def _copy_attempt(a: Attempt) -> Attempt:
    return Attempt.from_dict(a.to_dict())
