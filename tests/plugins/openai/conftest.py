"""Fixtures for the openai plugin tests: the user's agent module (loaded from its file, not edited for
tether) and a guard that every test leaves the SDK unpatched."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import pytest_asyncio

from tether.capture import redirect

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The agent module's async client is built once, at import, like a user's; its connection pool binds to
    # the event loop it first runs in, so the async tests here share one loop (as rollouts in a runner do).
    for item in items:
        if pytest_asyncio.is_async_test(item) and HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)


@pytest.fixture(scope="session")
def agent_module() -> ModuleType:
    """The agent module, imported before any redirect is installed (its clients are built at import)."""
    assert not redirect.is_installed()
    name = "plain_openai_agent"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "plain_openai_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_leaked_patch() -> Iterator[None]:
    from openai._base_client import BaseClient

    original = BaseClient.__dict__["_build_request"]
    yield
    leaked = redirect.install_count()
    while redirect.is_installed():
        redirect.uninstall()
    assert leaked == 0, f"test left the redirect installed ({leaked} references)"
    assert BaseClient.__dict__["_build_request"] is original
