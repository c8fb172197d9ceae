"""Paged rollout queries (``Store.query_rollouts``, ``Store.count_rollouts``): what a page of the dashboard reads.

A ``RolloutQuery`` names filters, an order and one page: ``limit`` rollouts after the ``after`` cursor (the
``next`` of the previous page: keyset paging, each page an index range, whatever its depth) and ``offset``
more rows skipped (for jumping to a far page; costs a walk of the skipped rows). Orders: ``newest`` /
``oldest`` (the order rollouts were added), ``reward_desc`` / ``reward_asc`` (rollouts with a reward, ties
newest first in ``desc`` and oldest first in ``asc``, then those without one, newest first).

The SQL backends share ``page_sql``: one statement per page per phase (rewarded, then unrewarded) that an
index serves in order, so a page reads ``offset + limit`` index entries, never the table. Stores without
SQL page a Python list (``page_of``). A cursor is opaque to callers and only valid on the backend that
made it, for the same filters and order; a malformed one is ``InvalidInput``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def _filters(query: RolloutQuery, arg: Callable[[Any], str], like: str) -> list[str]:
    where: list[str] = []
    if query.status is not None:
        where.append(f"status = {arg(RolloutStatus(query.status).value)}")
    if query.mode is not None:
        where.append(f"mode = {arg(Mode(query.mode).value)}")
    if query.task_id is not None:
        where.append(f"task_id = {arg(query.task_id)}")
    if query.resources_version is not None:
        where.append(f"resources_version = {arg(query.resources_version)}")
    if query.min_reward is not None:
        where.append(f"reward >= {arg(query.min_reward)}")
    if query.max_reward is not None:
        where.append(f"reward <= {arg(query.max_reward)}")
    if query.search:
        pattern = "%" + query.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        in_id, in_task = arg(pattern), arg(pattern)
        where.append(f"(rollout_id {like} {in_id} ESCAPE '\\' OR task_id {like} {in_task} ESCAPE '\\')")
    return where


def page_sql(
    query: RolloutQuery, phase: str, after: Cursor | None, limit: int | None, offset: int, *, table: str,
    cols: str, placeholder: Callable[[int], str], like: str = "LIKE",
) -> tuple[str, list[Any]]:  # fmt: skip
    """One phase of a page: ``SELECT seq, reward, <cols>`` in the order's index order. ``phase`` is ``r`` (rows
    with a reward, reward orders) or ``n`` (every row by position; rows without a reward in reward orders).
    ``limit`` None: every row of the phase, unordered (to count them)."""
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return placeholder(len(args))

    where = _filters(query, arg, like)
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
    sql = f"SELECT seq, reward, {cols} FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    if limit is None:
        return sql, args
    sql += f" ORDER BY {order} LIMIT {arg(limit)}"
    if offset:
        sql += f" OFFSET {arg(offset)}"
    return sql, args


async def sql_page(
    query: RolloutQuery,
    fetch: Callable[[str, list[Any]], Awaitable[Sequence[Sequence[Any]]]],
    decode: Callable[[Sequence[Any]], Rollout],
    **sql: Any,
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
        text, args = page_sql(query, phase, after, want + 1, offset, **sql)
        rows = await fetch(text, args)
        if offset and not rows:  # the offset went past every row of this phase: skip them in the next
            text, args = page_sql(query, phase, after, None, 0, **sql)
            counted = await fetch(f"SELECT COUNT(*) FROM ({text}) AS phase", args)
            offset = max(0, offset - int(counted[0][0]))
        else:
            offset = 0
        for row in rows[:want]:
            out.append(decode(row[2:]))
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


def page_of(query: RolloutQuery, rollouts: Iterable[Rollout]) -> RolloutPage:
    """A page of ``rollouts`` (every rollout the store holds, oldest first), as the SQL backends page them:
    positions are places in that list, which a cursor names by rollout id."""
    query = query.checked()
    positioned = [(i, r) for i, r in enumerate(rollouts) if _matches(query, r)]
    keys: list[tuple[str, float, int, Rollout]] = []
    for i, r in positioned:
        if query.by_reward and r.reward is not None:
            sign = -1.0 if query.order == "reward_desc" else 1.0
            keys.append(("0r", sign * r.reward, int(sign) * i, r))
        else:
            keys.append(("1n", 0.0, i if query.order == "oldest" else -i, r))
    keys.sort(key=lambda k: (k[0], k[1], k[2]))
    start = 0
    if query.after is not None:
        start = _after(query, keys)
    start += query.offset
    chosen = keys[start : start + query.limit]
    more = start + query.limit < len(keys) and query.limit > 0
    return RolloutPage([k[3] for k in chosen], f"n:{chosen[-1][3].rollout_id}" if more and chosen else None)


def _after(query: RolloutQuery, keys: list[tuple[str, float, int, Rollout]]) -> int:
    text = query.after or ""
    if not text.startswith("n:"):
        raise InvalidInput(f"malformed page cursor {text!r}: pass the 'next' of the previous page")
    rollout_id = text[2:]
    for k, key in enumerate(keys):
        if key[3].rollout_id == rollout_id:
            return k + 1
    raise InvalidInput(f"page cursor {text!r} names a rollout no longer in these results; start at the first page")


def counts_of(rollouts: Iterable[Rollout], mode: Mode | None = None) -> dict[str, int]:
    """Rollouts by status (every status, zeros included), of ``mode`` if given."""
    out = {s.value: 0 for s in RolloutStatus}
    for r in rollouts:
        if mode is None or r.mode == mode:
            out[RolloutStatus(r.status).value] += 1
    return out
