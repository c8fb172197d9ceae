"""The memory store against the shared store conformance suite."""

from __future__ import annotations

from pathlib import Path

from tether.store import Store, open_store
from tether.store.memory import MemoryStore
from tether.testing.store_conformance import StoreConformance


class TestMemoryStore(StoreConformance):
    async def make_store(self, tmp_path: Path) -> Store:
        return open_store("memory:")

    async def test_open_store_gives_a_memory_store(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
