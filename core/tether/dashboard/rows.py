"""The dashboard's rollout list, row by row: what a row shows (``Row``, its ``Detail``), the filters a page
asks with (``Filters``, ``parse_filters``), a page (``Page``), and a row as the page's JSON."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from tether import spans
from tether.types import Attempt, Mode, Rollout, RolloutStatus, Span, SpanKind


def record_task(kind: str) -> str:
    """The task id of an algorithm's record rollout (``Session.open_record``): found by an indexed query."""
    return f"{spans.RECORD_METADATA}:{kind}"


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
            **{name: getattr(rollout, name) for name in _AS_IT_IS},
            mode=str(rollout.mode),
            status=str(rollout.status),
            error=_last_line(rollout.error),
            record=str(record) if record is not None else None,
            candidate=str(candidate) if candidate is not None else None,
        )

    @property
    def finished(self) -> bool:
        return RolloutStatus(self.status).finished


#: the fields of a ``Row`` that are the rollout's field of the same name as it is (the others are shown otherwise)
_AS_IT_IS = tuple(f.name for f in fields(Row) if f.name not in {"mode", "status", "error", "record", "candidate"})


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
    total: int | None  # rows matching every filter but the sub-agent one; None: not counted (reward, search)
    offset: int
    next_offset: int | None  # where the next page starts in those rows; None at the end
    scanned: int  # with a sub-agent filter: how many rows were looked at for this page
    exact: bool  # False when a sub-agent filter stopped early (its budget) and more may match
    counts: dict[str, int] | None = None  # None: not counted yet (a cold page went on without waiting)
    refreshed_at: float = 0.0  # when the counts were taken
    agents: list[str] = field(default_factory=list)


def detail_of(attempts: Sequence[Attempt], found: Sequence[Span]) -> Detail:
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


def row_json(row: Row, detail: Detail) -> dict[str, Any]:
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
        "record": row.record,
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
