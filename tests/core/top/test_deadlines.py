"""``tether._deadlines.Deadlines``: one timer limiting many concurrent awaits, as ``asyncio.timeout`` would."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether._deadlines import Deadlines


async def _answer(after_s: float, value: str) -> str:
    await asyncio.sleep(after_s)
    return value


async def test_many_awaits_each_limited_and_the_quick_ones_answered() -> None:
    deadlines = Deadlines(0.3)
    started = time.monotonic()
    outcomes = await asyncio.gather(
        *(deadlines.within(_answer(0.01 if k % 2 else 5.0, f"v{k}")) for k in range(40)), return_exceptions=True
    )
    took = time.monotonic() - started
    assert [o for k, o in enumerate(outcomes) if k % 2] == [f"v{k}" for k in range(1, 40, 2)]
    assert all(type(o) is TimeoutError for k, o in enumerate(outcomes) if not k % 2)
    assert 0.3 <= took < 1.0  # the limit, plus at most a tick (limit / 8), not the 5 s answers
    assert deadlines._pending == {} and deadlines._expired == set() and deadlines._timer is None


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    deadlines = Deadlines(5.0)
    task = asyncio.create_task(deadlines.within(_answer(10.0, "late")))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines._pending == {}


async def test_the_timer_stops_when_nothing_is_pending_and_restarts() -> None:
    deadlines = Deadlines(0.2)
    assert await deadlines.within(_answer(0.0, "a")) == "a"
    await asyncio.sleep(0.1)  # its one tick (0.025 s) found nothing pending: no timer left running
    assert deadlines._timer is None
    with pytest.raises(TimeoutError):
        await deadlines.within(_answer(1.0, "late"))
    assert await deadlines.within(_answer(0.0, "b")) == "b"  # the task timed out once; it goes on unharmed


async def test_nested_awaits_in_one_task_each_keep_their_limit() -> None:
    outer, inner = Deadlines(5.0), Deadlines(0.1)

    async def nested() -> str:
        return await inner.within(inner.within(_answer(1.0, "late")))

    with pytest.raises(TimeoutError):
        await outer.within(nested())


def test_works_across_event_loops_and_refuses_a_bad_limit() -> None:
    deadlines = Deadlines(0.1)
    for _ in range(2):  # a backend reused by a second asyncio.run (tests, notebooks)
        with pytest.raises(TimeoutError):
            asyncio.run(deadlines.within(_answer(1.0, "late")))
        assert asyncio.run(deadlines.within(_answer(0.0, "ok"))) == "ok"
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="limit_s must be > 0"):
            Deadlines(bad)
