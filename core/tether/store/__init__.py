"""Stores, opened by URL: ``memory:``, ``sqlite:///path.db`` (default), ``http://host:port``,
``postgresql://user@host:port/db``.

``open_store`` imports only the backend it needs.
"""

from __future__ import annotations

from pathlib import Path

from tether.store.base import (
    Harvested,
    ImportedRollout,
    ImportResult,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Store,
    StoreError,
)

__all__ = [
    "DEFAULT_STORE_URL",
    "Harvested",
    "ImportResult",
    "ImportedRollout",
    "InvalidInput",
    "InvalidTransition",
    "NotFound",
    "Store",
    "StoreError",
    "open_store",
]

DEFAULT_STORE_URL = "sqlite:///runs/tether.db"


def open_store(url: str = DEFAULT_STORE_URL, *, token: str | None = None) -> Store:
    """Open the store named by ``url``.

    - ``memory:`` — in this process only.
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` — a file (created with its folder).
    - ``http://host:port`` — a running ``tether store serve``; ``token`` (or ``TETHER_STORE_TOKEN``) is sent
      as a bearer token.
    - ``postgresql://user[:password]@host[:port]/database`` (or ``postgres://``) — a PostgreSQL database
      (``pip install "tether[postgres]"``); tether creates its ``tether_*`` tables there on first use.
    """
    if not isinstance(url, str):
        raise TypeError(f"store URL must be a string, got {type(url).__name__}")
    if url in ("memory:", "memory://"):
        from tether.store.memory import MemoryStore

        return MemoryStore()
    if url.startswith("sqlite://"):
        from tether.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite://")
        if not path.startswith("/") or path == "/":
            raise ValueError(f"bad SQLite URL {url!r}: write sqlite:///relative.db or sqlite:////abs/path.db")
        return SqliteStore(Path(path[1:]) if path != "/:memory:" else ":memory:")
    if url.startswith(("http://", "https://")):
        from tether.store.http_client import HttpStore

        return HttpStore(url, token=token)
    if url.startswith(("postgresql://", "postgres://")):
        from tether.store.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"unknown store URL {url!r}; use memory:, sqlite:///path.db, http://host:port (tether store serve) or postgresql://user@host/db"
    )
