"""The docs' store blocks run here (tox env ``postgres``), on a real PostgreSQL server: docs/store.md's four
``open_store`` URLs (SQLite, memory, a served store, PostgreSQL) and docs/scale-out.md's PostgreSQL one each open
a store that takes a rollout and gives it back. Only the hosts differ: the test's server for ``db-host``, a
store served on a free port for ``127.0.0.1:4747``. ``tests/core/top/test_docs_blocks.py`` checks every docs block
is run somewhere or marked not run."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "top"))

from docblocks import run_block

import tether
from tether.server import start_server
from tether.types import RolloutSpec


def _opening(opened: list[tether.Store]) -> types.SimpleNamespace:
    """A ``tether`` whose ``open_store`` keeps each store the block opens (the block reassigns one name)."""

    def open_store(url: str) -> tether.Store:
        opened.append(tether.open_store(url))
        return opened[-1]

    return types.SimpleNamespace(open_store=open_store)


async def _round_trip(store: tether.Store) -> None:
    (rollout,) = await store.enqueue([RolloutSpec(input={"question": "2+2?"})])
    assert (await store.get_rollout(rollout.rollout_id)).input == {"question": "2+2?"}
    await store.close()


def _swaps(pg_url: str, **more: str) -> dict[str, str]:
    return {"postgresql://tether@db-host/tether": pg_url, **more}


async def test_the_store_pages_urls_open_working_stores(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # sqlite:///runs/x.db is relative to the current folder
    (tmp_path / "runs").mkdir()
    opened: list[tether.Store] = []
    served = tether.open_store("memory:")
    async with await start_server(served) as server:
        swaps = _swaps(pg_url, **{"http://127.0.0.1:4747": server.url})
        await asyncio.to_thread(run_block, "store.md:1", {"tether": _opening(opened)}, swaps)
        assert len(opened) == 4
        for store in opened:
            await _round_trip(store)
        assert len(await served.list_rollouts()) == 1  # the served store got the HTTP client's rollout
    assert (tmp_path / "runs" / "x.db").exists()  # the SQLite file, where the URL says
    async with tether.open_store(pg_url) as database:  # and the PostgreSQL database holds its rollout
        assert len(await database.list_rollouts()) == 1


async def test_the_scale_out_pages_postgres_url(pg_url: str) -> None:
    opened: list[Any] = []
    swaps = {"postgresql://tether:secret@db-host:5432/tether": pg_url}
    await asyncio.to_thread(run_block, "scale-out.md:1", {"tether": _opening(opened)}, swaps)
    await _round_trip(opened[0])
