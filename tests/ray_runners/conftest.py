"""One local Ray head for the tests in this folder (2 CPUs, no dashboard), whose workers can import by name the
users' agents of the plugins' tests: the plain openai calculator agent (tests/plugins/openai/plain_calc_agent.py)
and the LangGraph calculator graph (tests/plugins/langgraph/langgraph_calc_graph.py); and a real PostgreSQL
server, as in tests/postgres."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.testing.pg_server import TempPostgres, find_bindir

#: the folders of the agent modules the actors import (users' agents, shared with the plugins' tests)
AGENTS = [str(Path(__file__).parent.parent / "plugins" / name) for name in ("openai", "langgraph")]
sys.path[:0] = AGENTS


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    import ray

    # the workers Ray starts inherit this process's environment: they import the agents' modules from AGENTS
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*AGENTS, old) if p)
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
