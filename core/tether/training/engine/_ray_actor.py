"""The Ray actor of ``tether.RayRunners``: one ``Runner`` with its own proxy, in its own process.

It imports no Ray (``tether.training.engine.ray_runners`` makes it an actor with ``ray.remote``). ``serve`` opens
the shared store (an HTTP store server or PostgreSQL), a ``SpanBatcher`` on it, a ``ProxyServer`` in front of an
``HttpBackend`` (the trainer's own backend, token ids and all) and a ``Runner`` that instruments the agent's
adapter in this process, then runs rollouts until ``stop``. The proxy and the adapters share the batcher, as in the
trainer's process, so an attempt's spans reach the store in the order they happened.
"""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from tether.capture.span_batcher import PROXY_QUIET_S, SpanBatcher
from tether.models.http_backend import HttpBackend
from tether.plugin.wrap import WrappedAgent
from tether.proxy import ProxyServer
from tether.store import open_store
from tether.training.engine.runner import Runner


@dataclass(eq=False)
class RunnerActor:
    """Runs rollouts of ``agent`` from the store at ``store_url``, its model served at ``backend_url``."""

    agent: WrappedAgent
    _: KW_ONLY
    store_url: str
    backend_url: str
    worker_id: str
    concurrency: int
    poll_s: float
    _stop: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    async def ready(self) -> str:
        return self.worker_id

    async def stop(self) -> None:
        self._stop.set()

    async def serve(self) -> dict[str, Any]:
        """Run rollouts until ``stop``; returns how many succeeded and failed here."""
        store = open_store(self.store_url)
        backend = HttpBackend(self.backend_url)
        batcher = SpanBatcher(store, quiet_s=PROXY_QUIET_S)
        try:
            async with ProxyServer(backend, batcher=batcher, policies=self.agent.policies) as proxy:
                runner = Runner(
                    self.agent,
                    store,
                    proxy,
                    batcher=batcher,
                    concurrency=self.concurrency,
                    worker_id=self.worker_id,
                    poll_s=self.poll_s,
                )
                async with runner:
                    stats = await runner.serve(self._stop)
        finally:
            await batcher.close()
            await backend.close()
            await store.close()
        return {"worker_id": self.worker_id, "succeeded": stats.succeeded, "failed": stats.failed}
