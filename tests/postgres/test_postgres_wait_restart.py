"""Issue 37 item 8: ``wait_for_rollouts`` on PostgreSQL rides out a restart of the server: it waits for the
server, listens again once it is back, and returns when the rollouts finish (it raised ``StoreError``)."""

from __future__ import annotations

import asyncio

from tether.store import open_store
from tether.store.retry import retry_outage
from tether.testing.pg_server import TempPostgres
from tether.types import AttemptStatus, RolloutSpec


async def test_wait_for_rollouts_reconnects_across_a_server_restart(pg_server: TempPostgres, pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        rollouts = await store.enqueue([RolloutSpec(input=i) for i in range(2)])
        claimed = await store.dequeue("w", limit=2)
        ids = [r.rollout_id for r in rollouts]
        waiting = asyncio.ensure_future(store.wait_for_rollouts(ids, timeout=90))
        await asyncio.sleep(0.5)  # listening
        await asyncio.to_thread(pg_server.stop, "fast")
        await asyncio.sleep(1.0)  # the waiter finds the server gone
        assert not waiting.done(), waiting.exception() if waiting.done() else None
        await asyncio.to_thread(pg_server.start)
        for _, attempt in claimed:  # finished after the restart: the waiter hears it
            await retry_outage(
                lambda a=attempt: store.finish_attempt(a.attempt_id, AttemptStatus.SUCCEEDED), "end"
            )
        done = await asyncio.wait_for(waiting, 60)
        assert sorted(r.rollout_id for r in done) == sorted(ids)
    finally:
        await store.close()
