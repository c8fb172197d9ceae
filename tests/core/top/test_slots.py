"""``tether._slots.Slots``: the bound on calls in flight that the proxy and the upstream pool take per call."""

from __future__ import annotations

import asyncio

import pytest

from tether._slots import Slots


async def test_free_slots_are_taken_at_once_and_waiters_served_in_order() -> None:
    slots = Slots(2)
    assert slots.try_take() and slots.try_take()
    assert not slots.try_take()
    order: list[int] = []

    async def wait(n: int) -> None:
        await slots.take()
        order.append(n)

    waiters = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert order == []
    slots.give()
    slots.give()
    await asyncio.sleep(0)
    assert order == [0, 1]
    assert not slots.try_take()  # a waiter is still queued: a newcomer does not overtake it
    slots.give()  # waiter 0 done: its slot goes to waiter 2
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    slots.give()  # waiters 1 and 2 done
    slots.give()
    assert slots.try_take() and slots.try_take() and not slots.try_take()


async def test_a_cancelled_waiter_holds_no_slot_and_blocks_nobody() -> None:
    slots = Slots(1)
    assert slots.try_take()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await slots.take()
    slots.give()
    assert slots.try_take()  # the timed-out waiter left the queue: the freed slot is takeable at once
    slots.give()


async def test_a_waiter_cancelled_after_being_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # handed to `first`, which is cancelled before it resumes
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)  # `second` got the slot `first` could not use
    assert not slots.try_take()
    slots.give()
    assert slots.try_take()


async def test_a_waiter_cancelled_while_a_slot_is_freed_leaves_it_free() -> None:
    slots = Slots(1)
    assert slots.try_take()
    waiter = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    waiter.cancel()  # its future is cancelled now; it resumes later
    slots.give()  # skips the cancelled waiter: the slot is free
    (outcome,) = await asyncio.gather(waiter, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)
    assert slots.try_take() and not slots.try_take()


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit must be >= 1"):
        Slots(0)
