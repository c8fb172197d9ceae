"""The pieces the core gives plugins to share (``tether.plugin.tasks``, ``tether.plugin.loop_pool``): the task
text rule, the run output's shape, and objects made per event loop and closed with it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tether.plugin.loop_pool import LoopPool
from tether.plugin.tasks import TASK_KEYS, RunOutput, task_text
from tether.types import Task


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("what is 2+2?", "what is 2+2?"),
        ({"question": "q", "answer": 4}, "q"),
        ({"prompt": "p", "task": "t"}, "t"),  # TASK_KEYS order, not the dict's
        ({"task": 3, "input": "i"}, "i"),  # only strings count
        ({"a": 1, "b": [1, "é"]}, json.dumps({"a": 1, "b": [1, "é"]}, ensure_ascii=False)),
        (Task(input={"question": "from a Task"}), "from a Task"),
        (42, "42"),
    ],
)
def test_task_text(task: Any, expected: str) -> None:
    assert task_text(task) == expected
    assert TASK_KEYS == ("task", "question", "input", "prompt")


def test_run_output_is_a_dict_whose_text_is_the_answer() -> None:
    output = RunOutput(text="42", extra=[1])
    assert output == {"text": "42", "extra": [1]} and output.text == "42" and str(output) == "42"
    assert RunOutput(text=None).text == "" and json.loads(json.dumps(output)) == output


class _Client:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.closed = False

    async def close(self) -> None:
        assert asyncio.get_running_loop() is self.loop, "closed on another loop"
        self.closed = True


def test_each_loop_gets_its_own_objects_closed_with_it() -> None:
    pool, owner, other = LoopPool(), object(), object()
    made: list[_Client] = []

    def make() -> _Client:
        made.append(_Client(asyncio.get_running_loop()))
        return made[-1]

    async def run() -> tuple[_Client, _Client]:
        first = pool.get(owner, make, _Client.close)
        assert pool.get(owner, make, _Client.close) is first  # one per owner and loop
        second = pool.get(other, make)  # nothing to close
        assert second is not first and len(pool) == 2
        pool.close_for_running_loop()
        await asyncio.sleep(0)  # the close is scheduled on the loop
        assert first.closed and not second.closed and len(pool) == 0
        return first, second

    one = asyncio.run(run())
    two = asyncio.run(run())  # a second loop (as a second Trainer.dev): fresh objects
    assert len(made) == 4 and not set(one) & set(two)
    pool.close_for_running_loop()  # outside a loop: nothing to do
