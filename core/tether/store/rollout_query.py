"""Paged rollout queries (``Store.query_rollouts``, ``Store.count_rollouts``): what a page of the dashboard reads.

A ``RolloutQuery`` names filters, an order and one page: ``limit`` rollouts after the ``after`` cursor (the
``next`` of the previous page: keyset paging, each page an index range, whatever its depth) and ``offset``
more rows skipped (for jumping to a far page; costs a walk of the skipped rows). Orders: ``newest`` /
``oldest`` (the order rollouts were added), ``reward_desc`` / ``reward_asc`` (rollouts with a reward, ties
newest first in ``desc`` and oldest first in ``asc``, then those without one, newest first).

The SQL backends share ``page_sql``: one statement per page per phase (rewarded, then unrewarded) that an
index serves in order, so a page reads ``offset + limit`` index entries, never the table. Stores without
SQL page a Python list (``page_of``) the same way. A cursor is opaque to callers and only valid on the backend that
made it, for the same filters and order; a malformed one is ``InvalidInput``. It holds the sort key of the
page's last row (its phase, reward and position), never a lookup of that row, so it survives the row's deletion.

``Store.usage_by_version`` (the dashboard's resources page) is one aggregate: ``usage_sql`` on SQL backends.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.store._rows import ROLLOUT_COLS, rollout_from_row
from tether.store._sql import Args, Dialect, conditions, status_mode
from tether.store.errors import InvalidInput, validate_int, validate_number
from tether.types import Mode, Rollout, RolloutStatus

ORDERS = ("newest", "oldest", "reward_desc", "reward_asc")
MAX_PAGE = 1000  # the most rollouts one page may carry
MAX_SEARCH = 200  # characters of a search string


@dataclass(frozen=True, slots=True)
class RolloutQuery:
    """Filters (every given one must match), an order, and one page. ``search`` is a case-insensitive part
    of the rollout id or the task id (the one filter no index serves: it scans until the page is full)."""

    status: RolloutStatus | None = None
    mode: Mode | None = None
    task_id: str | None = None
    resources_version: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    search: str | None = None
    order: str = "newest"
    after: str | None = None
    offset: int = 0
    limit: int = 50

    def checked(self) -> RolloutQuery:
        """This query with its values normalised (``InvalidInput`` naming a bad one)."""
        if self.order not in ORDERS:
            raise InvalidInput(f"order must be one of {list(ORDERS)}, got {self.order!r}")
        try:
            status = None if self.status is None else RolloutStatus(self.status)
            mode = None if self.mode is None else Mode(self.mode)
        except ValueError as exc:
            raise InvalidInput(f"rollout query: {exc}") from None
        for name in ("task_id", "search", "after"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidInput(f"{name} must be a string or None, got {type(value).__name__}")
        if self.search is not None and len(self.search) > MAX_SEARCH:
            raise InvalidInput(f"search must be at most {MAX_SEARCH} characters")
        if self.search is not None and "\x00" in self.search:  # SQLite's LIKE ends the pattern there: every row
            raise InvalidInput("search must not contain NUL (\\x00)")
        version = self.resources_version
        version = None if version is None else validate_int(version, "resources_version")
        low = None if self.min_reward is None else validate_number(self.min_reward, "min_reward")
        high = None if self.max_reward is None else validate_number(self.max_reward, "max_reward")
        return RolloutQuery(
            status, mode, self.task_id, version, low, high, self.search or None, self.order, self.after,
            validate_int(self.offset, "offset (an integer >= 0)", 0),
            validate_int(self.limit, f"limit (an integer from 0 to {MAX_PAGE})", 0, MAX_PAGE),
        )  # fmt: skip

    @property
    def by_reward(self) -> bool:
        return self.order in ("reward_desc", "reward_asc")

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": None if self.status is None else RolloutStatus(self.status).value,
            "mode": None if self.mode is None else Mode(self.mode).value,
            "task_id": self.task_id, "resources_version": self.resources_version, "min_reward": self.min_reward,
            "max_reward": self.max_reward, "search": self.search, "order": self.order, "after": self.after,
            "offset": self.offset, "limit": self.limit,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutQuery:
        if not isinstance(data, dict):
            raise InvalidInput("a rollout query must be a JSON object")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise InvalidInput(f"unknown rollout query fields {sorted(unknown)}")
        return cls(**data).checked()


@dataclass(slots=True)
class RolloutPage:
    """One page of rollouts; ``next`` is the ``after`` of the page that follows (None: this is the last)."""

    rollouts: list[Rollout] = field(default_factory=list)
    next: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rollouts": [r.to_dict() for r in self.rollouts], "next": self.next}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutPage:
        return cls([Rollout.from_dict(r) for r in data["rollouts"]], data["next"])


# -- cursors -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page ended: the phase (``r`` rewarded, ``n`` unrewarded or any order by position), the last
    reward (``r`` only) and the last position."""

    phase: str
    reward: float | None
    position: int

    def encode(self) -> str:
        return f"{self.phase}:{self.position}" if self.reward is None else f"r:{self.reward!r}:{self.position}"

    @classmethod
    def decode(cls, text: str | None, by_reward: bool) -> Cursor | None:
        if text is None:
            return None
        try:
            parts = text.split(":")
            if parts[0] == "r" and len(parts) == 3 and by_reward:
                return cls("r", validate_number(float(parts[1]), "cursor"), int(parts[2]))
            if parts[0] == "n" and len(parts) == 2:
                return cls("n", None, int(parts[1]))
        except (ValueError, InvalidInput):
            pass
        raise InvalidInput(f"malformed page cursor {text!r}: pass the 'next' of the previous page")


# -- SQL -----------------------------------------------------------------------------------------------------


def _filters(query: RolloutQuery, args: Args, like: str) -> list[str]:
    where = conditions(
        args, *status_mode(query.status, query.mode), ("task_id =", query.task_id),
        ("resources_version =", query.resources_version), ("reward >=", query.min_reward),
        ("reward <=", query.max_reward),
    )  # fmt: skip
    if query.search:
        pattern = "%" + query.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        in_id, in_task = args.add(pattern), args.add(pattern)
        where.append(f"(rollout_id {like} {in_id} ESCAPE '\\' OR task_id {like} {in_task} ESCAPE '\\')")
    return where


def page_sql(
    query: RolloutQuery, phase: str, after: Cursor | None, limit: int | None, offset: int, dialect: Dialect
) -> tuple[str, list[Any]]:
    """One phase of a page: ``SELECT seq, reward, <cols>`` in the order's index order. ``phase`` is ``r`` (rows
    with a reward, reward orders) or ``n`` (every row by position; rows without a reward in reward orders).
    ``limit`` None: every row of the phase, unordered (to count them)."""
    args = Args(dialect)
    arg = args.add
    where = _filters(query, args, dialect.like)
    desc = query.order in ("newest", "reward_desc")
    if phase == "r":
        where.append("reward IS NOT NULL")
        direction = "DESC" if desc else "ASC"
        order = f"reward {direction}, seq {direction}"
        if after is not None and after.phase == "r":
            where.append(f"(reward, seq) {'<' if desc else '>'} ({arg(after.reward)}, {arg(after.position)})")
    else:
        if query.by_reward:
            where.append("reward IS NULL")
            desc = True
        order = f"seq {'DESC' if desc else 'ASC'}"
        if after is not None and after.phase == "n":
            where.append(f"seq {'<' if desc else '>'} {arg(after.position)}")
    sql = f"SELECT seq, reward, {ROLLOUT_COLS} FROM {dialect.table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    if limit is None:
        return sql, args.values
    sql += f" ORDER BY {order} LIMIT {arg(limit)}"
    if offset:
        sql += f" OFFSET {arg(offset)}"
    return sql, args.values


async def sql_page(
    query: RolloutQuery,
    fetch: Callable[[str, list[Any]], Awaitable[Sequence[Sequence[Any]]]],
    dialect: Dialect,
) -> RolloutPage:
    """A page through a SQL backend: ``fetch(sql, args)`` returns the rows of one statement."""
    query = query.checked()
    if query.limit == 0:
        return RolloutPage()
    after = Cursor.decode(query.after, query.by_reward)
    phases = ["r", "n"] if query.by_reward else ["n"]
    if query.by_reward and (query.min_reward is not None or query.max_reward is not None):
        phases = ["r"]  # a reward range holds no unrewarded row
    if after is not None and after.phase == "n":
        phases = ["n"]
    out: list[Rollout] = []
    last: Cursor | None = None
    offset = query.offset
    for phase in phases:
        want = query.limit - len(out)  # 0: only whether this phase holds more (the page is full)
        text, args = page_sql(query, phase, after, want + 1, offset, dialect)
        rows = await fetch(text, args)
        if offset and not rows:  # the offset went past every row of this phase: skip them in the next
            text, args = page_sql(query, phase, after, None, 0, dialect)
            counted = await fetch(f"SELECT COUNT(*) FROM ({text}) AS phase", args)
            offset = max(0, offset - int(counted[0][0]))
        else:
            offset = 0
        for row in rows[:want]:
            out.append(rollout_from_row(row[2:]))
            last = Cursor(phase, row[1] if phase == "r" else None, row[0])
        if len(rows) > want:
            return RolloutPage(out, None if last is None else last.encode())
    return RolloutPage(out, None)


# -- Python (stores without SQL) -----------------------------------------------------------------------------


def _matches(query: RolloutQuery, rollout: Rollout) -> bool:
    if query.status is not None and rollout.status != query.status:
        return False
    if query.mode is not None and rollout.mode != query.mode:
        return False
    if query.task_id is not None and rollout.task_id != query.task_id:
        return False
    if query.resources_version is not None and rollout.resources_version != query.resources_version:
        return False
    if query.min_reward is not None and (rollout.reward is None or rollout.reward < query.min_reward):
        return False
    if query.max_reward is not None and (rollout.reward is None or rollout.reward > query.max_reward):
        return False
    if query.search:
        needle = query.search.lower()
        return needle in rollout.rollout_id.lower() or needle in rollout.task_id.lower()
    return True


def page_of(query: RolloutQuery, rollouts: Iterable[Rollout | tuple[int, Rollout]]) -> RolloutPage:
    """A page of ``rollouts`` (every rollout the store holds, oldest first), as the SQL backends page them. An
    item is a rollout or ``(position, rollout)``: positions increase in the order rollouts were added and are
    never reused (a bare rollout's position is its place in the list). The cursor holds the last row's sort
    key (reward and position), as the SQL backends' do, so it survives the deletion of that row."""
    query = query.checked()
    keys: list[tuple[str, float, int, Rollout]] = []
    for i, item in enumerate(rollouts):
        position, r = item if isinstance(item, tuple) else (i, item)
        if _matches(query, r):
            phase = "r" if query.by_reward and r.reward is not None else "n"
            keys.append((*_key(query, phase, r.reward, position), r))
    keys.sort(key=lambda k: (k[0], k[1], k[2]))
    start = 0
    after = Cursor.decode(query.after, query.by_reward)
    if after is not None:
        where = _key(query, after.phase, after.reward, after.position)
        start = bisect.bisect_right(keys, where, key=lambda k: k[:3])
    start += query.offset
    chosen = keys[start : start + query.limit]
    more = start + query.limit < len(keys) and query.limit > 0
    if not (more and chosen):
        return RolloutPage([k[3] for k in chosen], None)
    last = chosen[-1]
    phase = "r" if last[0] == "0r" else "n"
    cursor = Cursor(phase, last[3].reward if phase == "r" else None, _position(query, phase, last[2]))
    return RolloutPage([k[3] for k in chosen], cursor.encode())


def _descending(query: RolloutQuery, phase: str) -> bool:
    """Whether ``phase`` runs newest (largest) first in ``query``'s order."""
    return query.order in ("newest", "reward_desc") or (phase == "n" and query.by_reward)


def _key(query: RolloutQuery, phase: str, reward: float | None, position: int) -> tuple[str, float, int]:
    """The ascending sort key of a row of ``phase`` (``page_of``'s order)."""
    sign = -1 if _descending(query, phase) else 1
    if phase == "r":
        return ("0r", sign * float(reward or 0.0), sign * position)
    return ("1n", 0.0, sign * position)


def _position(query: RolloutQuery, phase: str, keyed: int) -> int:
    return -keyed if _descending(query, phase) else keyed


@dataclass(frozen=True, slots=True)
class VersionUsage:
    """The rollouts of one resources version: how many, how many have a reward, and those rewards' sum."""

    rollouts: int
    rewarded: int
    reward_sum: float

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    def to_list(self) -> list[Any]:
        return [self.rollouts, self.rewarded, self.reward_sum]


def usage_sql(dialect: Dialect) -> str:
    """``Store.usage_by_version`` in SQL: one aggregate over the table (rows without a version left out)."""
    return (
        f"SELECT resources_version, COUNT(*), COUNT(reward), COALESCE(SUM(reward), 0) FROM {dialect.table} "
        "WHERE resources_version IS NOT NULL GROUP BY resources_version"
    )


def usage_of(rows: Iterable[Sequence[Any]]) -> dict[int, VersionUsage]:
    """``usage_sql``'s rows (or the wire's ``[version, rollouts, rewarded, sum]`` lists) by version."""
    return {int(v): VersionUsage(int(n), int(k), float(total)) for v, n, k, total in rows}


def usage_from(rollouts: Iterable[Rollout]) -> dict[int, VersionUsage]:
    """``Store.usage_by_version`` of a list of rollouts (stores without SQL)."""
    out: dict[int, list[Any]] = {}
    for r in rollouts:
        if r.resources_version is not None:
            entry = out.setdefault(r.resources_version, [0, 0, 0.0])
            entry[0] += 1
            if r.reward is not None:
                entry[1] += 1
                entry[2] += r.reward
    return {v: VersionUsage(n, k, total) for v, (n, k, total) in out.items()}


def counts_of(rollouts: Iterable[Rollout], mode: Mode | None = None) -> dict[str, int]:
    """Rollouts by status (every status, zeros included), of ``mode`` if given."""
    out = {s.value: 0 for s in RolloutStatus}
    for r in rollouts:
        if mode is None or r.mode == mode:
            out[RolloutStatus(r.status).value] += 1
    return out
