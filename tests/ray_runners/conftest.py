"""One local Ray head for the tests in this folder (2 CPUs, no dashboard), whose workers can import the plain
openai calculator agent (tests/plugins/openai/plain_calc_agent.py) by name; and a real PostgreSQL server, as in
tests/postgres."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.testing.pg_server import TempPostgres, find_bindir

#: the folder of the agent module the actors import (a user's agent, shared with the openai plugin's tests)
AGENTS = Path(__file__).parent.parent / "plugins" / "openai"
sys.path.insert(0, str(AGENTS))


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    import ray

    # the workers Ray starts inherit this process's environment: they import plain_calc_agent from AGENTS
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(AGENTS), old) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    if find_bindir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (.ci/run does it)")
    with TempPostgres() as server:
        yield server
