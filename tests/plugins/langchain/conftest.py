"""The langchain plugin tests share one event loop: the agent module's clients are built once, at import,
like a user's, and an async HTTP client's connection pool binds to the loop it first runs in."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if pytest_asyncio.is_async_test(item) and HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)
