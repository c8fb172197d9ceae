"""The rollout statements both SQL stores run, written once and parametrised by a ``Dialect``: where the
rollouts are, how an argument is written (``?`` in SQLite, ``$1, $2, ...`` in PostgreSQL) and how a list of
ids is passed. ``tether.store.sqlite._queries`` and ``tether.store.postgres._queries`` each define theirs; the
dashboard's pages (``tether.store.rollout_query.sql_page``) take the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.store._rows import ROLLOUT_COLS
from tether.types import Mode, RolloutStatus


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one SQL backend writes the statements of this module."""

    table: str  #: the rollouts table
    placeholder: Callable[[int], str]  #: the n-th argument (from 1)
    in_ids: str  #: the condition "rollout_id is one of the ids", ``{}`` standing for the ids' placeholder
    ids_arg: Callable[[list[str]], Any]  #: the ids as that placeholder's argument
    like: str = "LIKE"  #: case-insensitive LIKE


class Args:
    """The arguments of one statement: ``add`` appends one and returns its placeholder."""

    def __init__(self, dialect: Dialect) -> None:
        self.values: list[Any] = []
        self._placeholder = dialect.placeholder

    def add(self, value: Any) -> str:
        self.values.append(value)
        return self._placeholder(len(self.values))


def conditions(args: Args, *tests: tuple[str, Any]) -> list[str]:
    """``"<test> <placeholder>"`` for each ``(test, value)`` whose value is not None (``test``: ``"mode ="``)."""
    return [f"{test} {args.add(value)}" for test, value in tests if value is not None]


def status_mode(status: RolloutStatus | None, mode: Mode | None) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """The ``conditions`` of the status and mode filters."""
    return (
        ("status =", None if status is None else RolloutStatus(status).value),
        ("mode =", None if mode is None else Mode(mode).value),
    )


def list_sql(
    dialect: Dialect, status: RolloutStatus | None, mode: Mode | None, rollout_ids: Sequence[str] | None,
    limit: int | None,
) -> tuple[str, list[Any]]:  # fmt: skip
    """The statement (and its arguments) that ``list_rollouts`` runs; ``limit`` is already validated."""
    args = Args(dialect)
    where = conditions(args, *status_mode(status, mode))
    if rollout_ids is not None:
        where.append(dialect.in_ids.format(args.add(dialect.ids_arg(list(rollout_ids)))))
    sql = f"SELECT {ROLLOUT_COLS} FROM {dialect.table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {args.add(int(limit))}"
    return sql, args.values


def count_sql(dialect: Dialect, mode: Mode | None) -> tuple[str, list[Any]]:
    """The statement (and its arguments) that counts rollouts by status, of one mode or all."""
    if mode is None:
        return f"SELECT status, COUNT(*) FROM {dialect.table} GROUP BY status", []
    where = f"mode = {dialect.placeholder(1)}"
    return f"SELECT status, COUNT(*) FROM {dialect.table} WHERE {where} GROUP BY status", [Mode(mode).value]
