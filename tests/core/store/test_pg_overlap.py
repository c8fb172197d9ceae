"""``tether.store.postgres._overlap.Started``: a coroutine run up to its first wait now, the rest when awaited, as
``await`` would run it (results, exceptions and cancellations pass through). Plain asyncio, no server: the
PostgreSQL store's use of it is tested against a real server in tests/postgres."""

from __future__ import annotations

import asyncio

import pytest

from tether.store.postgres._overlap import PROBE, PROBE_EVERY, ReadOrder, Started


async def test_runs_up_to_the_first_wait_now_and_the_rest_when_awaited() -> None:
    steps: list[str] = []
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def call() -> int:
        steps.append("sent")
        value = await gate
        steps.append("answered")
        await asyncio.sleep(0)  # more waits after the first
        await asyncio.sleep(0.01)
        return value + 1

    started = Started(call())
    assert steps == ["sent"]  # before anything was awaited
    steps.append("work")
    asyncio.get_running_loop().call_later(0.01, gate.set_result, 41)
    assert await started == 42
    assert steps == ["sent", "work", "answered"]


async def test_a_call_that_never_waits_and_one_that_fails() -> None:
    async def at_once() -> str:
        return "done"

    assert await Started(at_once()) == "done"

    async def fails_first() -> None:
        raise ValueError("before any wait")

    with pytest.raises(ValueError, match="before any wait"):
        Started(fails_first())  # raised where it is started, as the call's first step raised it

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("after a wait")

    started = Started(fails_later())
    with pytest.raises(KeyError, match="after a wait"):
        await started


async def test_cancelling_the_awaiting_task_cancels_the_call() -> None:
    seen: list[str] = []

    async def call() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    async def reader() -> None:
        await Started(call())

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled inside"]


def _run(order: ReadOrder, seconds: dict[bool, float], reads: int) -> list[bool]:
    """``reads`` reads through ``order``, each taking ``seconds[overlapped]``; the order each took."""
    taken = []
    for _ in range(reads):
        overlap = order.overlap_next()
        taken.append(overlap)
        order.record(overlap, seconds[overlap])
    return taken


def test_read_order_keeps_overlapping_while_it_is_quicker_and_probes_the_other() -> None:
    order = ReadOrder()
    taken = _run(order, {True: 0.15, False: 0.3}, 4 * PROBE_EVERY)
    assert order.overlap
    assert taken.count(False) == 4 * PROBE  # only the probes went the other way
    assert taken[PROBE_EVERY - PROBE : PROBE_EVERY] == [False] * PROBE


def test_read_order_switches_to_the_quicker_order_and_back() -> None:
    order = ReadOrder()
    _run(order, {True: 0.4, False: 0.3}, PROBE_EVERY)  # overlapping was slower: after one probe, check-then-copy
    assert not order.overlap
    taken = _run(order, {True: 0.4, False: 0.3}, PROBE_EVERY)
    assert taken.count(True) == PROBE and not order.overlap  # probed, still slower
    _run(order, {True: 0.15, False: 0.3}, PROBE_EVERY)  # a core came free: overlapping is quicker again
    assert order.overlap
    _run(order, {True: 0.3, False: 0.28}, 4 * PROBE_EVERY)  # about as quick either way: no switch on noise
    assert order.overlap
