"""The store conformance suite: every backend must pass it, unchanged.

It checks each method of ``tether.store.base.Store`` against the contract written in that module's
docstrings: every state transition, every error, and that a method which raises changed nothing.

Using it for a backend
----------------------
Subclass ``StoreConformance`` in a test module whose class name starts with ``Test`` and implement
``make_store``; pytest (with pytest-asyncio) collects every inherited test::

    from tether.testing.store_conformance import StoreConformance

    class TestMyStore(StoreConformance):
        async def make_store(self, tmp_path):
            return MyStore(tmp_path / "db")

The ``store`` fixture calls ``make_store`` once per test (pytest makes a fresh instance of the class per
test, so ``make_store`` may keep per-test things such as a server on ``self``) and, after the test, awaits
``close_store(store)``, which by default awaits ``store.close()``. Override ``close_store`` to tear down
more (say, stop the server a client talks to), or override the ``store`` fixture itself for anything else.
Backend-specific tests go next to the inherited ones in the same class.

Timeouts and heartbeats are tested through ``requeue_stale(now=...)``; nothing sleeps waiting for a clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
import pytest_asyncio

from tether.store.base import Store
from tether.testing.store_conformance._base import span, spec
from tether.testing.store_conformance._harvest import HarvestConformance
from tether.testing.store_conformance._import import ImportConformance
from tether.testing.store_conformance._lifecycle import LifecycleConformance
from tether.testing.store_conformance._query import QueryConformance
from tether.testing.store_conformance._queue import QueueConformance
from tether.testing.store_conformance._span import SpanConformance

__all__ = ["StoreConformance", "span", "spec"]


class StoreConformance(
    QueueConformance,
    LifecycleConformance,
    SpanConformance,
    HarvestConformance,
    ImportConformance,
    QueryConformance,
):
    """Inherit from this in a ``Test...`` class and implement ``make_store``. See the module docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    async def make_store(self, tmp_path: Path) -> Store:
        raise NotImplementedError("subclasses of StoreConformance implement make_store(tmp_path) -> Store")

    async def close_store(self, store: Store) -> None:
        await store.close()

    @pytest_asyncio.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        made = await self.make_store(tmp_path)
        try:
            yield made
        finally:
            await self.close_store(made)
