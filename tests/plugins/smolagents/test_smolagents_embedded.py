"""smolagents agents on tether's embedded model: one short GRPO step trains only the managed agent ``optimize=``
names. The agents are built as the example builds them (its model and web tools, a manager with a managed
``search_agent``) but with a short system prompt (smolagents' ``prompt_templates``): its default one is about
3,000 tokens of the embedded model's tokenizer, over its 2,048-token context. The untrained model writes no
usable tool call, so a ``run=`` calls the managed agent as the manager would (``search_agent(task=...)``) and
then the manager, one step each (each ends with smolagents' final-answer call); only capture and the training
loop are checked."""

from __future__ import annotations

import asyncio
import importlib.resources
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from multiagent_script import example, question
from smolagents import ToolCallingAgent
from stand_ins import VisitWebpageTool, WebSearchTool

import tether
from tether_smolagents import SmolagentsOutput, summarize

_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")
pytestmark = pytest.mark.skipif(
    not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"'
)


def _short_prompts() -> dict[str, Any]:
    templates = yaml.safe_load(
        importlib.resources.files("smolagents.prompts").joinpath("toolcalling_agent.yaml").read_text()
    )
    templates["system_prompt"] = "Call one of the tools: {{ tools.keys() | list }}."
    return dict(templates)


def _agents() -> Any:
    search_agent = ToolCallingAgent(
        tools=[WebSearchTool(), VisitWebpageTool()],
        model=example.model,
        name="search_agent",
        description="This is an agent that can do web search.",
        prompt_templates=_short_prompts(),
        verbosity_level=0,
    )
    return ToolCallingAgent(
        tools=[],
        model=example.model,
        managed_agents=[search_agent],
        prompt_templates=_short_prompts(),
        verbosity_level=0,
    )


manager_agent = _agents()


def _both(agent: Any, task: dict[str, Any]) -> SmolagentsOutput:
    found = agent.managed_agents["search_agent"](task["task"], max_steps=1)
    return summarize(agent.run(f"{task['task']}\n{found}", max_steps=1))


async def _run(agent: Any, task: dict[str, Any]) -> SmolagentsOutput:
    return await asyncio.to_thread(_both, agent, task)


def _reward(task: dict[str, Any], output: Any) -> float:
    return float(len(str(output)) % 2)  # varies between samples, so GRPO's groups have an advantage


@pytest.mark.slow
def test_one_grpo_step_trains_only_the_named_sub_agent(tmp_path: Path) -> None:
    agent = tether.wrap(manager_agent, reward=_reward, run=_run, optimize=["search_agent"])
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
    names = [t.agent_name for t in rollout.transitions]
    assert set(names) == {"search_agent", "manager_agent"} and names[0] == "search_agent", (names, rollout.error)
    assert [t.trainable for t in rollout.transitions] == [n == "search_agent" for n in names]
    assert all(t.prompt_token_ids and t.response_token_ids and t.logprobs for t in rollout.transitions)
    result = trainer.fit(agent, train=[question(1), question(2)], preflight=False)
    (train,) = [h for h in result.history if h["kind"] == "train"]
    assert train["rollouts"] == 4 and train["failed"] == 0
    searches = names.count("search_agent")
    assert 0 < train["trained_transitions"] <= 4 * searches and train["grad_norm"] > 0
    assert (tmp_path / "grpo" / "checkpoint" / "config.json").exists()
