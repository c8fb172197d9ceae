"""Issue 37 item 7: sub-agent names are printed escaped in ``dev`` traces. A CrewAI role read from a YAML
block scalar ends in a newline; printed raw it broke every line of the trace after it."""

from __future__ import annotations

import openai

import tether
from tether.capture.context import agent_scope
from tether.testing.fake_llm import FakeLLM, text

client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
ROLE = "Senior Researcher\n"


async def researcher(task: str) -> str:
    with agent_scope(ROLE):
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


async def test_a_name_with_a_newline_is_printed_escaped() -> None:
    async with FakeLLM(handler=lambda request: text("found it")) as llm:
        report = await tether.Trainer(model=llm.base_url).adev(
            tether.wrap(researcher, reward=lambda t, o: 1.0), ["q"]
        )
    (rollout,) = report.rollouts
    assert [t.agent_name for t in rollout.transitions] == [ROLE]  # recorded as written
    lines = str(rollout).splitlines()
    assert "  'Senior Researcher\\n' → LLM: found it" in [line.split("  ·")[0] for line in lines]
    assert all(not line.startswith(" → ") and line.strip() != "Senior Researcher" for line in lines)
    assert "Senior Researcher → LLM" not in str(rollout)
