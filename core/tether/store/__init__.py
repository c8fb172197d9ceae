"""Stores, opened by URL: ``memory:``, ``sqlite:///path.db`` (default), ``http://host:port``,
``postgresql://user@host:port/db``.

``open_store`` imports only the backend it needs.
"""

from __future__ import annotations

from pathlib import Path

from tether.store.base import Harvested, ImportedRollout, ImportResult, Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound, StoreError
from tether.store.rollout_query import RolloutPage, RolloutQuery

__all__ = [
    "DEFAULT_STORE_URL",
    "Harvested",
    "ImportResult",
    "ImportedRollout",
    "InvalidInput",
    "InvalidTransition",
    "NotFound",
    "RolloutPage",
    "RolloutQuery",
    "Store",
    "StoreError",
    "open_store",
]

DEFAULT_STORE_URL = "sqlite:///runs/tether.db"


def open_store(url: str = DEFAULT_STORE_URL, *, token: str | None = None) -> Store:
    """Open the store named by ``url``.

    - ``memory:`` — in this process only; it keeps the latest 10,000 finished rollouts
      (``memory:?keep_rollouts=N``; ``keep_rollouts=all`` keeps every one).
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` — a file (created with its folder).
    - ``http://host:port`` — a running ``tether store serve``; ``token`` (or ``TETHER_STORE_TOKEN``) is sent
      as a bearer token.
    - ``postgresql://user[:password]@host[:port]/database`` (or ``postgres://``) — a PostgreSQL database
      (``pip install "tether[postgres]"``); tether creates its ``tether_*`` tables there on first use.
    """
    if not isinstance(url, str):
        raise TypeError(f"store URL must be a string, got {type(url).__name__}")
    if url in ("memory:", "memory://") or url.startswith(("memory:?", "memory://?")):
        from tether.store.memory import DEFAULT_KEEP_ROLLOUTS, MemoryStore

        return MemoryStore(keep_rollouts=_keep_rollouts(url, DEFAULT_KEEP_ROLLOUTS))
    if url.startswith("sqlite://"):
        from tether.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite://")
        if not path.startswith("/") or path == "/":
            raise ValueError(f"bad SQLite URL {url!r}: write sqlite:///relative.db or sqlite:////abs/path.db")
        return SqliteStore(Path(path[1:]) if path != "/:memory:" else ":memory:")
    if url.startswith(("http://", "https://")):
        from tether.store.http.client import HttpStore

        return HttpStore(url, token=token)
    if url.startswith(("postgresql://", "postgres://")):
        from tether.store.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"unknown store URL {url!r}; use memory:, sqlite:///path.db, http://host:port (tether store serve) or postgresql://user@host/db"
    )


def _keep_rollouts(url: str, default: int) -> int | None:
    """The ``keep_rollouts`` of a ``memory:?keep_rollouts=N`` URL (``all``: None, keep every rollout)."""
    from urllib.parse import parse_qs

    _, _, query = url.partition("?")
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"keep_rollouts"})
    if unknown:
        raise ValueError(f"unknown memory store setting {unknown[0]!r} in {url!r}; it takes keep_rollouts=N")
    (value,) = params.get("keep_rollouts", [str(default)])[-1:]
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"keep_rollouts must be a whole number >= 1 or 'all', got {value!r} in {url!r}")
    return int(value)
