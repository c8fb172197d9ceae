"""Issue 37 item 8: a ``reward=`` mapping that names a sub-agent the rollout never had is reported, and its
value is no part of the rollout's reward (it was averaged in: ``{"agent": 0, "writter": 1}`` scored 0.5)."""

from __future__ import annotations

import openai
import pytest

import tether
from tether.capture.context import agent_scope
from tether.testing.fake_llm import FakeLLM, text

client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


async def writer(task: str) -> str:
    with agent_scope("writer"):
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


async def test_an_unknown_target_is_reported_and_not_averaged_in() -> None:
    async with FakeLLM(handler=lambda request: text("draft")) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        typo = tether.wrap(writer, reward=lambda t, o: {"writer": 0.0, "writter": 1.0})
        with pytest.warns(UserWarning, match="every reward was 0"):  # (the writer's own)
            found = await trainer.adev(typo, ["a", "b"])
        for rollout in found.rollouts:
            assert rollout.reward == 0.0  # the writer's own; the typo's 1.0 is not averaged in
            assert any("unknown sub-agent 'writter' in reward=" in p for p in rollout.problems)
        assert found.metrics()["mean_reward"] == 0.0
        nobody = tether.wrap(writer, reward=lambda t, o: {"nobody": 1.0})
        (only,) = (await trainer.adev(nobody, ["a"])).rollouts
        assert only.reward is None  # no known target: no reward (said as a problem), not 1.0
        known = tether.wrap(writer, reward=lambda t, o: {"writer": 0.5})
        (good,) = (await trainer.adev(known, ["a"])).rollouts
        assert good.reward == 0.5 and not good.problems
