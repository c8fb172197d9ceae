"""PydanticAI agents on tether's embedded model: one short GRPO step trains only the sub-agent ``optimize=``
names. The untrained model calls no tools, so the two agents run as PydanticAI's docs call "programmatic agent
hand-off" (application code runs one agent after the other); only capture and the training loop are checked."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from calc_agents import boss, calculator, question

import tether
from tether_pydantic_ai import PydanticAIOutput, summarize

_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")
pytestmark = pytest.mark.skipif(
    not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"'
)


async def _hand_off(agent: Any, task: dict[str, Any]) -> PydanticAIOutput:
    plan = await agent.run(task["question"])
    return summarize(await calculator.run(f"{task['question']}\n{plan.output}"))


def _reward(task: dict[str, Any], output: Any) -> float:
    return float(len(str(output)) % 2)  # varies between samples, so GRPO's groups have an advantage


@pytest.mark.slow
def test_one_grpo_step_trains_only_the_named_sub_agent(tmp_path: Path) -> None:
    agent = tether.wrap(boss, reward=_reward, run=_hand_off, optimize=["calculator"])
    trainer = tether.Trainer(
        model="embedded",
        algorithm=tether.GRPO(group_size=2, tasks_per_step=2),
        n_runners=4,
        steps=1,
        run_root=str(tmp_path),
        name="grpo",
        sampling={"max_tokens": 12},
    )
    report = trainer.dev(agent, [question(1)])
    (rollout,) = report.rollouts
    assert [t.agent_name for t in rollout.transitions] == ["boss", "calculator"], rollout.error
    assert [t.trainable for t in rollout.transitions] == [False, True]
    assert all(t.prompt_token_ids and t.response_token_ids and t.logprobs for t in rollout.transitions)
    result = trainer.fit(agent, train=[question(1), question(2)], preflight=False)
    (train,) = [h for h in result.history if h["kind"] == "train"]
    assert train["rollouts"] == 4 and train["failed"] == 0 and train["transitions"] == 8
    # the seeded run trains some of the four calculator calls and none of the boss's
    assert 0 < train["trained_transitions"] <= 4 and train["grad_norm"] > 0
    assert (tmp_path / "grpo" / "checkpoint" / "config.json").exists()
