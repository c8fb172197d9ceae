"""Issue 26 items 1-3 on PostgreSQL: a crash-stop (``pg_ctl stop -m immediate``) and restart of the server while
spans are written and traces imported. Nothing acknowledged is lost and nothing is stored twice."""

from __future__ import annotations

import asyncio

from tether.capture.span_batcher import SpanBatcher
from tether.store import open_store
from tether.store.base import ImportedRollout
from tether.store.retry import retry_outage
from tether.testing.pg_server import TempPostgres
from tether.types import AttemptStatus, RolloutSpec, Span, SpanKind


def _span(rollout_id: str, attempt_id: str, i: int) -> Span:
    return Span(rollout_id, attempt_id, SpanKind.OTHER, "step", attributes={"i": i}, span_id=f"sp-{i}")


async def test_a_crash_stop_of_postgres_loses_no_span_and_stores_none_twice(
    pg_server: TempPostgres, pg_url: str
) -> None:
    store = open_store(pg_url)
    try:
        await store.enqueue([RolloutSpec(input=i) for i in range(3)])
        (r1, a1), (_, a2), (_, a3) = await store.dequeue("w", limit=3)
        async with SpanBatcher(store, max_batch=25, max_delay_s=0.01, retry_delay_s=0.1) as batcher:
            for i in range(100):
                batcher.submit(_span(r1.rollout_id, a1.attempt_id, i))
            await batcher.flush()
            await asyncio.to_thread(pg_server.stop, "immediate")  # a crash: no shutdown checkpoint
            restart = asyncio.get_running_loop().call_later(
                3.0, lambda: asyncio.ensure_future(asyncio.to_thread(pg_server.start))
            )
            for i in range(100, 200):
                batcher.submit(_span(r1.rollout_id, a1.attempt_id, i))
            imported = retry_outage(
                lambda: store.import_rollout(
                    ImportedRollout(key="trace-1", spans=[_span("", "", 900 + i) for i in range(5)])
                ),
                "import",
            )
            ended = [
                retry_outage(lambda a=a: store.finish_attempt(a.attempt_id, AttemptStatus.SUCCEEDED), "finish")
                for a in (a2, a3)
            ]
            await asyncio.gather(batcher.flush(), imported, *ended)
            restart.cancel()
        assert batcher.dropped == 0
        got = [s.span_id for s in await store.get_spans(a1.attempt_id)]
        assert sorted(got) == sorted(f"sp-{i}" for i in range(200)) and len(got) == 200
        again = await store.import_rollout(
            ImportedRollout(key="trace-1", spans=[_span("", "", 900 + i) for i in range(5)])
        )
        assert again.added == 0 and len(await store.get_spans(again.attempt_id)) == 5
        for a in (a2, a3):
            assert (await store.get_attempts(a.rollout_id))[0].status == AttemptStatus.SUCCEEDED
    finally:
        await store.close()
