"""The PostgreSQL store on a real server: the shared conformance suite, and what only PostgreSQL does
(the schema's migrations, LISTEN/NOTIFY, URLs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.store import Store, open_store
from tether.store.postgres import PostgresStore
from tether.testing.pg_server import TempPostgres
from tether.testing.store_conformance import StoreConformance


class TestPostgresStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _server(self, pg_server: TempPostgres) -> None:
        self.server = pg_server

    async def make_store(self, tmp_path: Path) -> Store:
        store = open_store(self.server.new_database())
        assert isinstance(store, PostgresStore)
        return store
