"""A real PostgreSQL server for the tests in this folder: started once per session from the system's packages
(``tether.testing.pg_server``: initdb/pg_ctl into a temp dir, trust auth, a free 127.0.0.1 port, fsync=off),
with a fresh database per test (``pg_url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether.testing.pg_server import TempPostgres, find_bindir


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    if find_bindir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (.ci/run does it)")
    with TempPostgres() as server:
        yield server


@pytest.fixture
def pg_url(pg_server: TempPostgres) -> str:
    return pg_server.new_database()
