"""Issue 37 item 6: ``Trainer.dev`` warns when every reward is 0, and says what that means for ``fit``."""

from __future__ import annotations

import warnings

import openai
import pytest

import tether
from tether.testing.fake_llm import FakeLLM, text

client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


async def agent(task: str) -> str:
    reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


async def test_every_reward_zero_is_a_warning_that_names_what_fit_would_do() -> None:
    async with FakeLLM(handler=lambda request: text("no")) as llm:
        trainer = tether.Trainer(model=llm.base_url)
        with pytest.warns(UserWarning, match=r"every reward was 0 \(3 rollouts\): fit would learn nothing"):
            found = await trainer.adev(tether.wrap(agent, reward=lambda t, o: 0.0), ["a", "b", "c"])
        assert any("tether.WarmStart" in n for n in found.notes)  # a note: the wiring is not wrong
        assert not any("every reward was 0" in p for p in found.all_problems)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # one reward that is not 0: no warning
            found = await trainer.adev(tether.wrap(agent, reward=lambda t, o: float(t == "a")), ["a", "b"])
        assert not any("every reward was 0" in n for n in found.notes)
