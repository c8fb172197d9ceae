"""The store contract: the one rendezvous between trainer, runners, proxy and dashboard.

Every backend (memory, SQLite, HTTP client, later PostgreSQL) implements ``Store`` and passes the shared
conformance suite in ``tether.testing.store_conformance``. The methods are async because runners and the
proxy live on an event loop; backends whose work is quick and local may do it inline.

State machine
-------------
A rollout is ``queued`` until a worker dequeues it; ``dequeue`` atomically moves it to ``running`` and opens
a new attempt (``running``) owned by that worker, so a rollout is handed to exactly one worker at a time.

``finish_attempt(status="succeeded")`` ends the attempt and the rollout (``succeeded``).
``finish_attempt(status="failed")`` ends the attempt (``failed``); the rollout goes back to ``queued`` if it
has attempts left (``attempt_count < max_attempts``), else it ends ``failed`` with the attempt's error.
``requeue_stale()`` does the same for running attempts past their ``timeout_s`` or whose last heartbeat
(the last span that arrived, or an explicit ``heartbeat``) is older than ``heartbeat_timeout_s`` (by
default ``tether.types.DEFAULT_HEARTBEAT_TIMEOUT_S``, so the rollout of a worker that died is not left
running forever); such an attempt ends ``timeout`` and accepts no more spans. ``cancel_rollout`` ends a
queued or running rollout ``cancelled`` (its running attempt too). Finished rollouts never change again,
except that ``harvest`` removes them.

Imported rollouts (``import_rollout``) skip the queue: each is written already finished, with one finished
attempt, in one transaction, so no worker ever dequeues one and no import touches a queued or running
rollout. Its id comes from the caller's ``key`` (``import_id(key)``): importing the same key again (an
exporter's retry, or a later part of the same trace) adds only the spans whose ids are new and fills in
what the earlier part lacked, so a trace is never stored twice.

Errors
------
Every error is a ``StoreError``. ``NotFound`` (also a ``KeyError``) for unknown ids, ``InvalidTransition``
for a state change the machine above forbids (finishing a finished attempt, cancelling a finished rollout),
``InvalidInput`` (also a ``ValueError``) for malformed arguments (non-finite reward, span without kind,
unknown attempt in a span batch). A method that raises has changed nothing: batches are all-or-nothing.

Numbers: every integer argument (limits, ``since``, versions, ``max_attempts``) must be a 64-bit signed
integer and every time or reward a finite float, on every backend (what SQLite can hold); anything else is
``InvalidInput``. A ``limit`` is ``None`` (no limit) or ``>= 0``.

The checks every backend makes of its inputs (``validate_spec``, ``validate_span``, ...) are in
``tether.store._validate``; its errors (``StoreError`` and its kinds) in ``tether.store.errors``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether import _json
from tether.store._validate import Ending, span_attributes, validate_ending, validate_limit, validate_span
from tether.store.errors import InvalidInput, validate_int
from tether.store.rollout_query import RolloutPage, RolloutQuery, VersionUsage, counts_of, page_of, usage_from
from tether.types import Attempt, AttemptStatus, Mode, Rollout, Span, SpanKind

if TYPE_CHECKING:
    from tether.types import LLMEndpoint, PromptTemplate, Resources, RolloutSpec, RolloutStatus


@dataclass(slots=True)
class Harvested:
    """A finished rollout removed from the store by ``harvest``, with everything it held."""

    rollout: Rollout
    attempts: list[Attempt] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)

    def last_attempt_spans(self) -> list[Span]:
        """The spans of the rollout's last attempt (the one its outcome comes from), in arrival order."""
        last = self.attempts[-1].attempt_id if self.attempts else None
        return [s for s in self.spans if s.attempt_id == last]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout": self.rollout.to_dict(),
            "attempts": [a.to_dict() for a in self.attempts],
            "spans": [s.to_dict() for s in self.spans],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Harvested:
        return cls(
            rollout=Rollout.from_dict(data["rollout"]),
            attempts=[Attempt.from_dict(a) for a in data["attempts"]],
            spans=[Span.from_dict(s) for s in data["spans"]],
        )


@dataclass(slots=True)
class ImportedRollout:
    """A finished run from elsewhere (an imported trace), written by ``Store.import_rollout``.

    ``key`` names it across imports (a trace id); ``error`` set means it failed. The store sets each span's
    ``rollout_id`` and ``attempt_id``; a span whose ``span_id`` the rollout already holds is skipped."""

    key: str
    input: Any = None
    output: Any = None
    error: str | None = None
    mode: Mode = Mode.TRAIN
    metadata: dict[str, Any] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)
    worker_id: str = "tether-import"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "input": self.input, "output": self.output, "error": self.error,
            "mode": Mode(self.mode).value, "metadata": self.metadata, "spans": [s.to_dict() for s in self.spans],
            "worker_id": self.worker_id,
        }  # fmt: skip


@dataclass(slots=True)
class ImportResult:
    """What ``import_rollout`` did: the rollout's ids, whether it was new, and how many spans it added."""

    rollout_id: str
    attempt_id: str
    created: bool
    added: int

    def to_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "attempt_id": self.attempt_id, "created": self.created,
                "added": self.added}  # fmt: skip


MAX_IMPORT_KEY = 200


def import_id(key: str) -> tuple[str, str]:
    """The rollout and attempt ids of the import named ``key`` (never those of an enqueued rollout)."""
    return f"ro-imp-{key}", f"at-imp-{key}"


def validate_import(item: ImportedRollout) -> list[Span]:
    """Check ``item`` (``InvalidInput`` naming the problem); return its spans with duplicate ids dropped and
    their rollout and attempt ids set."""
    if not isinstance(item, ImportedRollout):
        raise InvalidInput(f"import_rollout takes an ImportedRollout, got {type(item).__name__}")
    if not isinstance(item.key, str) or not item.key or len(item.key) > MAX_IMPORT_KEY:
        raise InvalidInput(f"an import's key must be a non-empty string of at most {MAX_IMPORT_KEY} characters")
    if not item.key.isprintable() or "/" in item.key:
        raise InvalidInput(f"an import's key must be printable, without '/': got {item.key!r}")
    if item.error is not None and not isinstance(item.error, str):
        raise InvalidInput(f"an import's error must be a string or None, got {type(item.error).__name__}")
    if not isinstance(item.worker_id, str) or not item.worker_id:
        raise InvalidInput("an import's worker_id must be a non-empty string")
    if not isinstance(item.metadata, dict):
        raise InvalidInput(f"an import's metadata must be a dict, got {type(item.metadata).__name__}")
    try:
        Mode(item.mode)
    except ValueError:
        raise InvalidInput(f"mode must be 'train' or 'val', got {item.mode!r}") from None
    rollout_id, attempt_id = import_id(item.key)
    seen: set[str] = set()
    out = []
    for span in item.spans:
        validate_span(span)
        if not isinstance(span.span_id, str) or not span.span_id:
            raise InvalidInput(f"span {span.name!r}: span_id must be a non-empty string")
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        out.append(
            Span(rollout_id, attempt_id, SpanKind(span.kind), span.name, span.agent_name, span.attributes,
                 span.span_id, span.parent_id, span.start_time, span.end_time)
        )  # fmt: skip
    return out


def encode_import(item: ImportedRollout) -> tuple[list[Span], tuple[bytes, bytes, bytes], list[bytes]]:
    """``validate_import``, then the JSON a SQL backend stores: the rollout's input, output and metadata, and
    each span's attributes (``InvalidInput`` naming what does not encode). Nothing is written yet."""
    spans = validate_import(item)
    try:
        blobs = (_json.dumps(item.input), _json.dumps(item.output), _json.dumps(item.metadata))
    except TypeError as exc:
        raise InvalidInput(f"imported rollout input/output/metadata: {exc}") from None
    return spans, blobs, [span_attributes(span) for span in spans]


FINISHED_ATTEMPT_STATUSES = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.TIMEOUT, AttemptStatus.CANCELLED}
)


class Store(abc.ABC):
    """Abstract store. See the module docstring for the state machine and the errors.

    ``dequeue``, ``finish_attempt`` and ``list_rollouts`` check their arguments here, once for every backend,
    then call the backend's ``_dequeue``, ``_finish_attempt`` and ``_list_rollouts``."""

    # -- rollouts -----------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def enqueue(self, specs: Sequence[RolloutSpec]) -> list[Rollout]:
        """Add queued rollouts, in order. Raises ``InvalidInput`` (nothing added) if any spec is malformed
        (``max_attempts`` < 1, negative timeouts)."""

    async def dequeue(self, worker_id: str, limit: int = 1) -> list[tuple[Rollout, Attempt]]:
        """Claim up to ``limit`` queued rollouts in queue order (enqueue order; a rollout requeued after a
        failed or stale attempt goes to the back) for ``worker_id``: each becomes ``running``
        with a new ``running`` attempt. Returns ``[]`` when none is queued; never blocks."""
        if not isinstance(worker_id, str) or not worker_id:
            raise InvalidInput("worker_id must be a non-empty string")
        if validate_int(limit, "limit") < 1:
            return []
        return await self._dequeue(worker_id, limit)

    @abc.abstractmethod
    async def _dequeue(self, worker_id: str, limit: int) -> list[tuple[Rollout, Attempt]]:
        """``dequeue`` once its arguments are checked (``limit`` >= 1)."""

    async def finish_attempt(
        self,
        attempt_id: str,
        status: AttemptStatus,
        *,
        output: Any = None,
        reward: float | None = None,
        error: str | None = None,
    ) -> Rollout:
        """End a running attempt ``succeeded`` or ``failed`` and move its rollout as the module docstring
        says. Returns the rollout after the change. ``NotFound`` for an unknown attempt,
        ``InvalidTransition`` if it is not running or ``status`` is not succeeded/failed,
        ``InvalidInput`` for a non-finite reward or an output that is not JSON-serialisable."""
        return await self._finish_attempt(attempt_id, validate_ending(status, output, reward, error))

    @abc.abstractmethod
    async def _finish_attempt(self, attempt_id: str, ending: Ending) -> Rollout:
        """``finish_attempt`` once its arguments are checked and the output encoded (``ending.output``)."""

    @abc.abstractmethod
    async def heartbeat(self, attempt_id: str) -> None:
        """Mark a running attempt alive now. ``NotFound`` / ``InvalidTransition`` as above."""

    @abc.abstractmethod
    async def requeue_stale(self, now: float | None = None) -> list[str]:
        """End running attempts past their timeout or heartbeat limit as ``timeout``; requeue or fail their
        rollouts. Returns the affected rollout ids."""

    @abc.abstractmethod
    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        """End a queued or running rollout ``cancelled``. ``InvalidTransition`` if already finished."""

    @abc.abstractmethod
    async def get_rollout(self, rollout_id: str) -> Rollout:
        """``NotFound`` if unknown."""

    async def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        mode: Mode | None = None,
        rollout_ids: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[Rollout]:
        """Rollouts matching every given filter, oldest first. Unknown ids in ``rollout_ids`` are skipped."""
        limit = validate_limit(limit)
        if limit == 0:
            return []
        return await self._list_rollouts(status, mode, None if rollout_ids is None else list(rollout_ids), limit)

    @abc.abstractmethod
    async def _list_rollouts(
        self, status: RolloutStatus | None, mode: Mode | None, rollout_ids: list[str] | None, limit: int | None
    ) -> list[Rollout]:
        """``list_rollouts`` once its limit is checked (None, or >= 1)."""

    @abc.abstractmethod
    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        """Attempts of a rollout, first first. ``NotFound`` if the rollout is unknown."""

    async def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        """One page of the rollouts matching ``query``'s filters, in its order, after its cursor
        (``tether.store.rollout_query``). ``InvalidInput`` for a malformed query or cursor. The SQL backends
        read one index range per page; this default pages a full ``list_rollouts()``."""
        return page_of(query, await self.list_rollouts())

    async def count_rollouts(self, *, mode: Mode | None = None) -> dict[str, int]:
        """How many rollouts (of ``mode``, if given) the store holds in each status (every status a key).
        The SQL backends count an index; this default counts a full ``list_rollouts()``."""
        return counts_of(await self.list_rollouts(mode=mode))

    async def usage_by_version(self) -> dict[int, VersionUsage]:
        """Per resources version: how many rollouts ran on it, how many have a reward and their sum (rollouts
        without a version left out). The SQL backends run one ``GROUP BY``; this default reads a full
        ``list_rollouts()``."""
        return usage_from(await self.list_rollouts())

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], timeout: float | None = None, poll_s: float = 0.05
    ) -> list[Rollout]:
        """Wait until every rollout in ``rollout_ids`` is finished or ``timeout`` seconds pass; return the
        finished ones. Backends may override with something smarter than polling."""
        import asyncio
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        wanted = list(rollout_ids)
        while True:
            rollouts = await self.list_rollouts(rollout_ids=wanted)
            done = [r for r in rollouts if r.status.finished]
            if len(done) == len(wanted) or (deadline is not None and time.monotonic() >= deadline):
                return done
            await asyncio.sleep(poll_s)

    # -- spans --------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        """Store a batch of spans, all or nothing; return the sequence number given to each (per attempt,
        from 0, in arrival order; any ``sequence`` set by the caller is ignored). A span for a running
        attempt is its heartbeat; spans of an attempt that ended otherwise are kept (a call answered late),
        except of one that timed out: its worker was presumed dead and the rollout moved on, so a late
        span of it raises ``InvalidTransition``. ``InvalidInput`` if any span names an unknown attempt, a
        rollout that does not own that attempt, an unknown kind, or carries non-JSON attributes."""

    @abc.abstractmethod
    async def get_spans(self, attempt_id: str, *, since: int = 0) -> list[Span]:
        """Spans of an attempt with ``sequence >= since``, in sequence order. ``NotFound`` if unknown."""

    # -- imports ------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def import_rollout(self, item: ImportedRollout) -> ImportResult:
        """Write a finished rollout from elsewhere, atomically, bypassing the queue (module docstring).

        New key: the rollout (ids from ``import_id``) is stored ``succeeded`` (``failed`` with ``item.error``)
        with one attempt of ``item.worker_id`` ended the same way, holding ``item.spans`` (sequence 0, 1, ...).
        Known key: spans with new ids are appended; the input is set if it was None, the output replaced if
        ``item.output`` is not None, and an ``item.error`` fails the rollout and its attempt. Nothing else
        changes. ``InvalidInput`` (nothing written) for a malformed item or span."""

    # -- resources ----------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def add_resources(
        self, *, llm: LLMEndpoint | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> Resources:
        """Publish a new resources version (1, 2, ...). Missing parts are carried over from the latest."""

    @abc.abstractmethod
    async def get_resources(self, version: int | None = None) -> Resources | None:
        """The given version (``NotFound`` if unknown), or the latest (``None`` if none yet)."""

    # -- memory -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def harvest(self, rollout_ids: Sequence[str] | None = None) -> list[Harvested]:
        """Remove finished rollouts (the given ones, or all finished) with their attempts and spans, and
        return them. ``InvalidTransition`` (nothing removed) if a given rollout is not finished,
        ``NotFound`` if unknown."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. The store is unusable afterwards."""

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
