"""The synchronous Trainer entry points run on one long-lived loop, so an agent's import-time async client
keeps working across calls (a fresh loop per call would leave its connection pool on a closed loop)."""

from __future__ import annotations

import plain_openai_agent

import tether
from tether.testing.fake_llm import FakeLLM, text
from tether.types import RolloutStatus


def test_two_sync_dev_calls_with_an_import_time_async_client() -> None:
    agent = tether.wrap(plain_openai_agent.aanswer, reward=lambda task, out: float(out == f"re: {task}"))
    with FakeLLM(handler=lambda request: text(f"re: {request['messages'][-1]['content']}")) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        for round_ in range(2):
            report = trainer.dev(agent, [f"q{round_}a", f"q{round_}b"])
            assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 2, [r.error for r in report]
            assert [r.reward for r in report] == [1.0, 1.0]


def test_sync_dev_inside_an_event_loop_names_the_async_variant() -> None:
    import asyncio

    import pytest

    agent = tether.wrap(plain_openai_agent.aanswer)

    async def _inside() -> None:
        tether.Trainer(model="http://127.0.0.1:9/v1").dev(agent, ["q"])

    with pytest.raises(RuntimeError, match="await the async variant"):
        asyncio.run(_inside())
