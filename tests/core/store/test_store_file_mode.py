"""Issue 37 item 8: a SQLite store's files are created readable by their owner only (0600): spans hold prompts,
answers and tool results, and the default store lives under ``runs/`` of a shared machine."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tether.store.sqlite import SqliteStore
from tether.types import RolloutSpec


async def test_store_files_are_created_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: files 0644 unless created otherwise
    try:
        path = tmp_path / "runs" / "r" / "store.db"
        store = SqliteStore(path)
        await store.enqueue([RolloutSpec(input="secret prompt")])
        files = [p for p in path.parent.iterdir() if p.name.startswith("store.db")]
        assert {p.name for p in files} >= {"store.db", "store.db-wal", "store.db-shm"}
        for p in files:
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        await store.close()
    finally:
        os.umask(old)


async def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    await SqliteStore(path).close()
    path.chmod(0o640)  # its owner chose to share it with a group
    store = SqliteStore(path)
    await store.enqueue([RolloutSpec(input="q")])
    await store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
