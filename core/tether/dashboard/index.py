"""The dashboard's view of one store's rollouts: each page one paged query of the store, so that a page costs
the same on a store of a hundred rollouts and of a million.

A page is ``Store.query_rollouts`` (``tether.store.rollout_query``): filters, order and page run in the store,
on its indexes. The next page continues from the cursor the previous one returned (kept per filters and
position), a far page (the last, or one typed in) skips rows with an offset. The counts by status come from
``Store.count_rollouts``, kept for ``max(COUNT_MIN_S, COUNT_FACTOR x the count's own duration)`` and shown with
the time they were taken; a page filtered by reward or by search has no count (it would scan the store): it
says whether more follow instead. Algorithm records (``spans.RECORD_METADATA``, task id ``record_task``) are
rows of the list like any rollout (marked ``record``), as they are in the counts: a page holds ``limit`` rows
and the pages add up to the count.
The sub-agents and duration of a rollout come from its attempts and spans: they are read for the rows of
the page shown only, and kept for finished rollouts. A sub-agent filter therefore scans rows in order under
a time budget and says how far it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether import spans
from tether.dashboard.rows import Detail, Filters, Page, Row, detail_of, record_task, row_json
from tether.store.base import Store
from tether.store.errors import NotFound
from tether.store.rollout_query import MAX_PAGE, RolloutQuery, VersionUsage
from tether.types import Mode, Rollout, RolloutStatus

COUNT_MIN_S = 2.0  # counts by status are taken again at most this often ...
COUNT_FACTOR = 20.0  # ... and at most once per this many times the count's own duration
COLD_WAIT_S = 0.15  # a page waits this long (from its start) for the first count, then goes on without
USAGE_MIN_S = 30.0  # the resources page's per-version figures (an aggregate query) at most this often
SCAN_BUDGET_S = 1.5  # a sub-agent filter reads spans for at most this long per page
MAX_LIMIT = 200
_DETAIL_CACHE = 50_000  # finished rollouts whose sub-agents and duration are kept
_CURSORS = 4096  # (filters, position) -> the store's cursor for the page that starts there


@dataclass(slots=True)
class _Counted:
    counts: dict[str, int]
    at: float  # time.time() when taken
    took: float
    monotonic: float


class RolloutIndex:
    """Pages of one store's rollouts, read by paged queries; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._details: dict[str, Detail] = {}
        self._agents_seen: set[str] = set()
        self._cursors: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._counts: dict[Mode | None, _Counted] = {}
        self._counting: dict[Mode | None, asyncio.Future[_Counted]] = {}
        self._usage: tuple[float, dict[int, VersionUsage]] | None = None
        self.refreshed_at = 0.0

    async def close(self) -> None:
        self._cursors.clear()
        for task in self._counting.values():
            task.cancel()
        for task in self._counting.values():
            with contextlib.suppress(BaseException):
                await task

    # -- counts -------------------------------------------------------------------------------------------

    async def counts(self, mode: Mode | None = None, wait_s: float = COLD_WAIT_S) -> _Counted | None:
        """Rollouts by status, and ``all`` (of ``mode`` if given), with when they were taken. The last count
        is answered at once while a new one runs in the background (at most as often as the module docstring
        says); with none yet, this waits ``wait_s`` for the first and answers None if it is not in by then."""
        known, task = self._counting_now(mode)
        if known is not None or task is None:
            return known
        if wait_s > 0:
            await asyncio.wait({task}, timeout=wait_s)
        return task.result() if task.done() else None

    def _counting_now(self, mode: Mode | None) -> tuple[_Counted | None, asyncio.Future[_Counted] | None]:
        known = self._counts.get(mode)
        task = self._counting.get(mode)
        due = known is None or time.monotonic() - known.monotonic >= max(COUNT_MIN_S, COUNT_FACTOR * known.took)
        if due and (task is None or task.done()):
            task = self._counting[mode] = asyncio.ensure_future(self._count(mode))
        return known, task

    async def _count(self, mode: Mode | None) -> _Counted:
        started = time.monotonic()
        counts = await self.store.count_rollouts(mode=mode)
        counts["all"] = sum(counts.values())
        done = time.monotonic()
        self._counts[mode] = counted = _Counted(counts, time.time(), done - started, done)
        return counted

    # -- pages --------------------------------------------------------------------------------------------

    async def page(self, filters: Filters, offset: int = 0, limit: int = 50) -> Page:
        """One page of rows from position ``offset`` of the rollouts matching ``filters``, with details."""
        limit = max(1, min(int(limit), MAX_LIMIT))
        offset = max(0, int(offset))
        mode = Mode(filters.mode) if filters.mode else None
        started = time.monotonic()
        # the first page of a store not counted yet is read while the count runs: it waits for the count at
        # the end, for what is left of COLD_WAIT_S; a later page needs the total first (far pages, clamping)
        counted = await self.counts(mode, 0.0 if offset == 0 else COLD_WAIT_S)
        total = _total(filters, counted)
        if total is not None:
            offset = min(offset, total)
        key = filters.key()
        after = self._cursors.get((key, offset)) if offset else None
        chosen: list[tuple[Row, Detail]] = []
        position, exact, more = offset, True, True
        if after is None and total is not None and offset > total // 2 and filters.sort in _REVERSED:
            if not filters.agent:  # a page past the middle: read from the other end (the last page is a first)
                back = _query(filters, None, max(0, total - offset - limit), min(limit, total - offset))
                found = await self.store.query_rollouts(back_query(back))
                position += len(found.rollouts)
                chosen = await self._with_details(filters, list(reversed(found.rollouts)))
                return self._page(chosen, filters, offset, position if position < total else None, exact, counted)
        skip = 0 if after is not None else offset
        deadline = time.monotonic() + SCAN_BUDGET_S
        while more and len(chosen) < limit:
            if filters.agent and position > offset and time.monotonic() > deadline:
                exact = False
                break
            found = await self.store.query_rollouts(_query(filters, after, skip, limit - len(chosen)))
            after, skip = found.next, 0
            more = found.next is not None
            position += len(found.rollouts)
            if found.next is not None:
                self._remember((key, position), found.next)
            chosen += await self._with_details(filters, found.rollouts)
            if not filters.agent:
                break  # a page is one query
        if counted is None:
            counted = await self.counts(mode, COLD_WAIT_S - (time.monotonic() - started))
        return self._page(chosen, filters, offset, position if more else None, exact, counted)

    async def _with_details(self, filters: Filters, rollouts: Sequence[Rollout]) -> list[tuple[Row, Detail]]:
        """The rows of ``rollouts`` with their details, those of the sub-agent filter."""
        rows = [Row.of(r) for r in rollouts]
        details = await asyncio.gather(*(self.detail(row) for row in rows))  # concurrent on a pooled store
        return [(row, d) for row, d in zip(rows, details, strict=True) if _has_agent(filters, d)]

    def _page(
        self, chosen: list[tuple[Row, Detail]], filters: Filters, offset: int, next_offset: int | None,
        exact: bool, counted: _Counted | None,
    ) -> Page:  # fmt: skip
        end = next_offset if next_offset is not None else offset + len(chosen)
        return Page(
            rows=[row_json(row, detail) for row, detail in chosen],
            total=_total(filters, counted),
            offset=offset,
            next_offset=next_offset,
            scanned=end - offset,
            exact=exact,
            counts=dict(counted.counts) if counted is not None else None,
            refreshed_at=counted.at if counted is not None else time.time(),
            agents=sorted(self._agents_seen),
        )

    def _remember(self, where: tuple[Any, ...], cursor: str) -> None:
        self._cursors[where] = cursor
        self._cursors.move_to_end(where)
        while len(self._cursors) > _CURSORS:
            self._cursors.popitem(last=False)

    # -- what other pages need ----------------------------------------------------------------------------

    async def group(self, rollout_id: str) -> list[str]:
        """The rollouts GRPO compares ``rollout_id`` with: same task, resources version and mode (one query)."""
        try:
            rollout = await self.store.get_rollout(rollout_id)
        except NotFound:
            return []
        query = RolloutQuery(task_id=rollout.task_id, resources_version=rollout.resources_version,
                             mode=rollout.mode, order="oldest", limit=MAX_PAGE)  # fmt: skip
        if rollout.resources_version is None:  # (None matches no row in a filter: page the task's rollouts)
            query = RolloutQuery(task_id=rollout.task_id, mode=rollout.mode, order="oldest", limit=MAX_PAGE)
        found = (await self.store.query_rollouts(query)).rollouts
        return [
            r.rollout_id for r in found if r.resources_version == rollout.resources_version and not _is_record(r)
        ]

    async def records(self, kind: str) -> list[Rollout]:
        """An algorithm's record rollouts (``record_task``), by an indexed query."""
        query = RolloutQuery(task_id=record_task(kind), order="oldest", limit=MAX_PAGE)
        return (await self.store.query_rollouts(query)).rollouts

    async def version_usage(self) -> dict[int, VersionUsage]:
        """Rollouts, rewarded rollouts and reward sum of each resources version: one aggregate query of the
        store (``Store.usage_by_version``), kept for ``max(USAGE_MIN_S, COUNT_FACTOR x its duration)``."""
        now = time.monotonic()
        if self._usage is not None and now < self._usage[0]:
            return self._usage[1]
        usage = await self.store.usage_by_version()
        took = time.monotonic() - now
        self._usage = (time.monotonic() + max(USAGE_MIN_S, COUNT_FACTOR * took), usage)
        return usage

    async def detail(self, row: Row) -> Detail:
        """Sub-agents, timing and call counts of a rollout (kept once it is finished)."""
        known = self._details.get(row.rollout_id)
        if known is not None:
            return known
        try:
            attempts = await self.store.get_attempts(row.rollout_id)
            last = attempts[-1] if attempts else None
            found = await self.store.get_spans(last.attempt_id) if last is not None else []
        except NotFound:  # harvested since the page was read
            attempts, found = [], []
        detail = detail_of(attempts, found)
        self._agents_seen.update(detail.agents)
        if row.finished:
            if len(self._details) >= _DETAIL_CACHE:
                self._details.pop(next(iter(self._details)))
            self._details[row.rollout_id] = detail
        return detail


_REVERSED = {"newest": "oldest", "oldest": "newest"}


def _total(filters: Filters, counted: _Counted | None) -> int | None:
    """How many rollouts match ``filters`` (but the sub-agent one), from the counts; None when a filter
    the counts do not cover (reward, search) applies, or there are no counts yet."""
    if counted is None or filters.min_reward is not None or filters.max_reward is not None or filters.query:
        return None
    return counted.counts[filters.status] if filters.status else counted.counts["all"]


def back_query(query: RolloutQuery) -> RolloutQuery:
    """``query`` in the reverse order (``newest`` <-> ``oldest``)."""
    return dataclasses.replace(query, order=_REVERSED[query.order])


def _has_agent(filters: Filters, detail: Detail) -> bool:
    return not filters.agent or filters.agent in detail.agents


def _is_record(rollout: Rollout) -> bool:
    return isinstance(rollout.metadata, dict) and spans.RECORD_METADATA in rollout.metadata


def _query(filters: Filters, after: str | None, offset: int, limit: int) -> RolloutQuery:
    return RolloutQuery(
        status=RolloutStatus(filters.status) if filters.status else None,
        mode=Mode(filters.mode) if filters.mode else None,
        min_reward=filters.min_reward, max_reward=filters.max_reward, search=filters.query,
        order=filters.sort, after=after, offset=offset, limit=limit,
    )  # fmt: skip
