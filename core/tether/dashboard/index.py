"""The dashboard's view of one store's rollouts: a cached summary row per rollout, filtered, sorted and paged
on the server so that no page ever carries the whole store.

Everything is read through the public ``Store`` API. A full ``list_rollouts()`` builds the index; after that,
a cheap poll (the queued and running rollouts, and the ones that were unfinished at the last look) keeps it
current, because a finished rollout never changes. A full re-read still happens now and then (at most every
``max(30 s, 20 x its own duration)``, in the background) to catch rollouts enqueued and finished between two
polls, and harvested ones. The sub-agents and duration of a rollout come from its attempts and spans: they
are read for the rows of the page shown only, and kept for finished rollouts. A sub-agent filter therefore
scans rows in order under a time budget and says how far it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import spans
from tether.store.base import NotFound, Store
from tether.types import Attempt, Mode, Rollout, RolloutStatus, Span, SpanKind

POLL_S = 1.0  # the cheap poll runs at most this often
MIN_FULL_S = 30.0  # a full re-read runs at most this often ...
FULL_FACTOR = 20.0  # ... and at most once per this many times its own duration
SCAN_BUDGET_S = 1.5  # a sub-agent filter reads spans for at most this long per page
MAX_LIMIT = 200
_DETAIL_CACHE = 50_000  # finished rollouts whose sub-agents and duration are kept


@dataclass(slots=True)
class Row:
    """The summary of one rollout that the index keeps (its input, output and metadata are not kept)."""

    rollout_id: str
    task_id: str
    mode: str
    status: str
    reward: float | None
    attempt_count: int
    max_attempts: int
    created_at: float
    finished_at: float | None
    resources_version: int | None
    error: str | None
    record: str | None  # an algorithm's record rollout (``spans.RECORD_METADATA``), not a run of the agent
    candidate: str | None  # the APO candidate it scored, if any

    @classmethod
    def of(cls, rollout: Rollout) -> Row:
        meta = rollout.metadata if isinstance(rollout.metadata, dict) else {}
        record = meta.get(spans.RECORD_METADATA)
        candidate = meta.get(spans.APO_CANDIDATE)
        return cls(
            rollout_id=rollout.rollout_id,
            task_id=rollout.task_id,
            mode=str(rollout.mode),
            status=str(rollout.status),
            reward=rollout.reward,
            attempt_count=rollout.attempt_count,
            max_attempts=rollout.max_attempts,
            created_at=rollout.created_at,
            finished_at=rollout.finished_at,
            resources_version=rollout.resources_version,
            error=_last_line(rollout.error),
            record=str(record) if record is not None else None,
            candidate=str(candidate) if candidate is not None else None,
        )

    @property
    def finished(self) -> bool:
        return RolloutStatus(self.status).finished


@dataclass(slots=True)
class Detail:
    """What a row shows beyond the rollout itself: read from its attempts and last attempt's spans."""

    agents: tuple[str, ...]
    started_at: float | None
    ended_at: float | None
    llm_calls: int
    tool_calls: int
    tool_errors: int


@dataclass(slots=True)
class Filters:
    status: str | None = None
    mode: str | None = None
    agent: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    query: str | None = None  # part of a rollout or task id
    sort: str = "newest"  # newest, oldest, reward_desc, reward_asc

    def key(self) -> tuple[Any, ...]:
        return (self.status, self.mode, self.min_reward, self.max_reward, self.query, self.sort)


SORTS = ("newest", "oldest", "reward_desc", "reward_asc")


@dataclass(slots=True)
class Page:
    rows: list[dict[str, Any]]
    total: int  # rows matching every filter but the sub-agent one
    offset: int
    next_offset: int | None  # where the next page starts in those rows; None at the end
    scanned: int  # with a sub-agent filter: how many rows were looked at for this page
    exact: bool  # False when a sub-agent filter stopped early (its budget) and more may match
    counts: dict[str, int] = field(default_factory=dict)
    refreshed_at: float = 0.0
    agents: list[str] = field(default_factory=list)


class RolloutIndex:
    """Summary rows of one store's rollouts, kept current by polling; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._rows: dict[str, Row] = {}
        self._unfinished: set[str] = set()
        self._details: dict[str, Detail] = {}
        self._agents_seen: set[str] = set()
        self._version = 0  # bumped when any row changes
        self._sorted: tuple[tuple[Any, ...], int, list[Row]] | None = None
        self._counts: tuple[int, dict[str, int]] | None = None
        self._lock = asyncio.Lock()
        self._full_at = 0.0
        self._full_s = 0.0
        self._poll_at = 0.0
        self._background: asyncio.Task[None] | None = None
        self.refreshed_at = 0.0

    # -- keeping current ------------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Bring the index up to date as cheaply as the module docstring says."""
        now = time.monotonic()
        if not self._full_at:
            async with self._lock:
                if not self._full_at:
                    await self._full()
            return
        if now - self._full_at > max(MIN_FULL_S, FULL_FACTOR * self._full_s):
            if self._background is None or self._background.done():
                self._background = asyncio.ensure_future(self._full_locked())
        if now - self._poll_at >= POLL_S and not self._lock.locked():  # a full re-read is running: serve this
            async with self._lock:
                if time.monotonic() - self._poll_at >= POLL_S:
                    await self._poll()

    async def close(self) -> None:
        if self._background is not None and not self._background.done():
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._background

    async def _full_locked(self) -> None:
        async with self._lock:
            await self._full()

    async def _full(self) -> None:
        started = time.monotonic()
        rollouts = await self.store.list_rollouts()
        self._rows = {r.rollout_id: Row.of(r) for r in rollouts}
        self._unfinished = {i for i, row in self._rows.items() if not row.finished}
        self._details = {i: d for i, d in self._details.items() if i in self._rows}
        self._changed()
        self._full_at = self._poll_at = time.monotonic()
        self._full_s = self._full_at - started
        self.refreshed_at = time.time()

    async def _poll(self) -> None:
        live: dict[str, Rollout] = {}
        for status in (RolloutStatus.QUEUED, RolloutStatus.RUNNING):
            for rollout in await self.store.list_rollouts(status=status):
                live[rollout.rollout_id] = rollout
        gone = [i for i in self._unfinished if i not in live]
        changed = bool(gone) or any(
            (row := self._rows.get(i)) is None
            or row.status != str(r.status)
            or row.attempt_count != r.attempt_count
            for i, r in live.items()
        )
        if gone:
            found = {r.rollout_id: r for r in await self.store.list_rollouts(rollout_ids=gone)}
            for rollout_id in gone:
                if rollout_id in found:
                    self._rows[rollout_id] = Row.of(found[rollout_id])
                else:  # harvested
                    self._rows.pop(rollout_id, None)
        for rollout_id, rollout in live.items():
            self._rows[rollout_id] = Row.of(rollout)
        self._unfinished = set(live)
        if changed:
            self._changed()
        self._poll_at = time.monotonic()
        self.refreshed_at = time.time()

    def _changed(self) -> None:
        self._version += 1
        self._sorted = None

    # -- reading --------------------------------------------------------------------------------------------

    def rows(self) -> Iterable[Row]:
        return self._rows.values()

    def get(self, rollout_id: str) -> Row | None:
        return self._rows.get(rollout_id)

    def counts(self) -> dict[str, int]:
        """Rollouts of the agent (not records) by status, and in all (kept until a row changes)."""
        if self._counts is not None and self._counts[0] == self._version:
            return dict(self._counts[1])
        out = {s.value: 0 for s in RolloutStatus}
        for row in self._rows.values():
            if row.record is None:
                out[row.status] = out.get(row.status, 0) + 1
        out["all"] = sum(out.values())
        self._counts = (self._version, dict(out))
        return out

    def records(self, kind: str) -> list[Row]:
        return [row for row in self._rows.values() if row.record == kind]

    def group(self, row: Row) -> list[Row]:
        """The rollouts GRPO compares ``row`` with: same task, same resources version, same mode."""
        return [
            r
            for r in self._rows.values()
            if r.task_id == row.task_id
            and r.resources_version == row.resources_version
            and r.mode == row.mode
            and r.record is None
        ]

    def filtered(self, filters: Filters) -> list[Row]:
        """Rows matching every filter but the sub-agent one, in the filters' order (cached per index state)."""
        key = filters.key()
        if self._sorted is not None and self._sorted[0] == key and self._sorted[1] == self._version:
            return self._sorted[2]
        rows = [r for r in self._rows.values() if r.record is None]
        if filters.status:
            rows = [r for r in rows if r.status == filters.status]
        if filters.mode:
            rows = [r for r in rows if r.mode == filters.mode]
        if filters.min_reward is not None or filters.max_reward is not None:
            low = filters.min_reward if filters.min_reward is not None else float("-inf")
            high = filters.max_reward if filters.max_reward is not None else float("inf")
            rows = [r for r in rows if r.reward is not None and low <= r.reward <= high]
        if filters.query:
            q = filters.query.strip().lower()
            rows = [r for r in rows if q in r.rollout_id.lower() or q in r.task_id.lower()]
        if filters.sort == "oldest":
            rows.sort(key=lambda r: r.created_at)
        elif filters.sort in ("reward_desc", "reward_asc"):
            sign = -1.0 if filters.sort == "reward_desc" else 1.0
            rows.sort(key=lambda r: (r.reward is None, sign * (r.reward or 0.0), -r.created_at))
        else:
            rows.sort(key=lambda r: -r.created_at)
        self._sorted = (key, self._version, rows)
        return rows

    async def page(self, filters: Filters, offset: int = 0, limit: int = 50) -> Page:
        """One page of rows from ``offset`` (a position in ``filtered(filters)``), with their details."""
        await self.refresh()
        limit = max(1, min(int(limit), MAX_LIMIT))
        base = self.filtered(filters)
        offset = max(0, min(int(offset), len(base)))
        chosen: list[tuple[Row, Detail]] = []
        position = offset
        scanned = 0
        exact = True
        if filters.agent:
            deadline = time.monotonic() + SCAN_BUDGET_S
            while position < len(base) and len(chosen) < limit:
                if time.monotonic() > deadline and scanned:
                    exact = False
                    break
                row = base[position]
                detail = await self.detail(row)
                scanned += 1
                position += 1
                if filters.agent in detail.agents:
                    chosen.append((row, detail))
        else:
            for row in base[offset : offset + limit]:
                chosen.append((row, await self.detail(row)))
            position = offset + len(chosen)
            scanned = len(chosen)
        return Page(
            rows=[_row_json(row, detail) for row, detail in chosen],
            total=len(base),
            offset=offset,
            next_offset=position if position < len(base) else None,
            scanned=scanned,
            exact=exact,
            counts=self.counts(),
            refreshed_at=self.refreshed_at,
            agents=sorted(self._agents_seen),
        )

    async def detail(self, row: Row) -> Detail:
        """Sub-agents, timing and call counts of a rollout (kept once it is finished)."""
        known = self._details.get(row.rollout_id)
        if known is not None:
            return known
        try:
            attempts = await self.store.get_attempts(row.rollout_id)
            last = attempts[-1] if attempts else None
            found = await self.store.get_spans(last.attempt_id) if last is not None else []
        except NotFound:  # harvested since the index saw it
            attempts, found = [], []
        detail = _detail_of(attempts, found)
        self._agents_seen.update(detail.agents)
        if row.finished:
            if len(self._details) >= _DETAIL_CACHE:
                self._details.pop(next(iter(self._details)))
            self._details[row.rollout_id] = detail
        return detail


def _detail_of(attempts: Sequence[Attempt], found: Sequence[Span]) -> Detail:
    agents: dict[str, None] = {}
    llm = tools = errors = 0
    for span in found:
        if span.agent_name and span.kind in (SpanKind.LLM, SpanKind.TOOL):
            agents[span.agent_name] = None
        if span.kind == SpanKind.LLM and span.name == spans.LLM_CALL:
            llm += 1
        elif span.kind == SpanKind.TOOL:
            tools += 1
            errors += span.attributes.get(spans.TOOL_ERROR) is not None
    started = attempts[0].started_at if attempts else None
    ended = attempts[-1].finished_at if attempts else None
    return Detail(tuple(agents), started, ended, llm, tools, errors)


def _row_json(row: Row, detail: Detail) -> dict[str, Any]:
    ended = detail.ended_at if detail.ended_at is not None else (None if row.finished else time.time())
    duration = ended - detail.started_at if ended is not None and detail.started_at is not None else None
    return {
        "rollout_id": row.rollout_id,
        "task_id": row.task_id,
        "mode": row.mode,
        "status": row.status,
        "reward": row.reward,
        "attempts": row.attempt_count,
        "max_attempts": row.max_attempts,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
        "duration_s": duration,
        "resources_version": row.resources_version,
        "error": row.error,
        "agents": list(detail.agents),
        "llm_calls": detail.llm_calls,
        "tool_calls": detail.tool_calls,
        "tool_errors": detail.tool_errors,
        "candidate": row.candidate,
    }


def _last_line(text: str | None) -> str | None:
    if not text or not text.strip():
        return None
    return text.strip().splitlines()[-1][:300]


def parse_filters(query: dict[str, str]) -> Filters:
    """Filters from a page's query parameters; ``ValueError`` names a bad one."""
    status = query.get("status") or None
    if status is not None and status not in {s.value for s in RolloutStatus}:
        raise ValueError(f"unknown status {status!r}; one of {[s.value for s in RolloutStatus]}")
    mode = query.get("mode") or None
    if mode is not None and mode not in {m.value for m in Mode}:
        raise ValueError(f"unknown mode {mode!r}; one of {[m.value for m in Mode]}")
    sort = query.get("sort") or "newest"
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; one of {list(SORTS)}")
    return Filters(
        status=status,
        mode=mode,
        agent=(query.get("agent") or "").strip() or None,
        min_reward=_float(query, "min_reward"),
        max_reward=_float(query, "max_reward"),
        query=(query.get("q") or "").strip() or None,
        sort=sort,
    )


def _float(query: dict[str, str], name: str) -> float | None:
    raw = (query.get(name) or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
