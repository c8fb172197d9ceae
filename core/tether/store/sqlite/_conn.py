"""The SQLite store's connection (``tether.store.sqlite``): opening its file, and SQLite's errors as store errors.

``connect`` creates the folder and the file (readable by its owner only, ``0600``: spans hold prompts, answers and
tool results; SQLite gives its ``-wal`` and ``-shm`` files the database file's mode), sets the pragmas (WAL,
``synchronous=NORMAL``, the busy timeout, the WAL's size cap) and the schema; a path that cannot hold a store (a
missing or read-only folder, a file that is not a database) is a ``StoreError`` naming it. ``store_error`` turns
what SQLite raises during a call (a file locked past the busy timeout, a full disk, a number it cannot bind) into
the contract's errors.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tether.store.errors import InvalidInput, StoreError
from tether.store.sqlite._rows import create_schema

WAL_CAP_BYTES = 64 * 1024 * 1024  # a writer checkpoints inline only past this (the background thread lags)


def connect(path: Path | str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection to the store at ``path`` (``":memory:"`` or an absolute ``Path``), schema in place."""
    try:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(path)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_s)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the SQLite store {path}: {_reason(exc)}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if path != ":memory:":  # background checkpoints keep the WAL small; inline ones are a backstop
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CAP_BYTES // page_size}")
            conn.execute(f"PRAGMA journal_size_limit = {WAL_CAP_BYTES}")
        create_schema(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot open the SQLite store {path}: {_reason(exc)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (an existing file keeps its mode)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def store_error(exc: BaseException, path: Path | str) -> BaseException:
    """The ``StoreError`` for an error of SQLite's (or of binding a value); any other error unchanged."""
    if isinstance(exc, OverflowError):
        return InvalidInput(f"a number is out of the range SQLite holds: {exc}")
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"SQLite store {path}: {exc}")
    return exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)
