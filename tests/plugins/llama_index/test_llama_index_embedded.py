"""One short GRPO step of tether's embedded model through LlamaIndex's multi-agent example
(fixtures/agent_workflow_multi.py). The untrained model calls no tool, so no handoff happens: every rollout is
the ResearchAgent's one call. ``optimize=["ResearchAgent"]`` trains on those calls; ``optimize=["WriteAgent"]``
names an agent that made none, which the preflight reports before any training. (Calls of all
three agents, and ``optimize=`` marking only the named one, are checked against the fake LLM in
test_llama_index_example.py.)"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agent_workflow_multi as example
import pytest

import tether
from tether.types import Transition

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason='the embedded model needs torch: pip install "tether[embedded]"',
)


@dataclass
class _GRPO(tether.GRPO):
    """tether.GRPO, keeping the transitions it was given to train on."""

    trained: list[Transition] = field(default_factory=list)

    def update(self, model: Any, transitions: Sequence[Transition], **kwargs: Any) -> dict[str, float]:
        self.trained.extend(transitions)
        return super().update(model, transitions, **kwargs)


def _step(tmp_path: Path, optimize: list[str]) -> tuple[dict[str, Any], _GRPO, bool]:
    """One GRPO step (2 tasks x 4 samples): its train record, the algorithm, whether the weights changed."""
    import torch

    from tether.models.embedded import EmbeddedBackend

    backend = EmbeddedBackend(preset="nano", seed=0)
    before = [p.detach().clone() for p in backend.model.parameters()]
    grpo = _GRPO(group_size=4, tasks_per_step=2, lr=1e-3)
    # a reward that varies with the answer, so each group has an advantage to learn from
    agent = tether.wrap(example.agent_workflow, reward=lambda task, out: len(out["text"]) / 100, optimize=optimize)
    result = tether.Trainer(
        model=backend,
        algorithm=grpo,
        steps=1,
        n_runners=4,
        name="llama_index",
        run_root=str(tmp_path),
        progress=False,
        sampling={"max_tokens": 8},
    ).fit(agent, [example.user_msg, "Write me a report on the history of radio."])
    (step,) = [h for h in result.history if h["kind"] == "train"]
    changed = any(not torch.equal(a, b) for a, b in zip(before, backend.model.parameters(), strict=True))
    return step, grpo, changed


def test_one_grpo_step_trains_the_named_agent(tmp_path: Path) -> None:
    step, grpo, changed = _step(tmp_path, ["ResearchAgent"])
    assert step["rollouts"] == 8 and step["failed"] == 0, step
    assert step["transitions"] == 8  # the ResearchAgent's answer, streamed, in every rollout
    assert grpo.trained and step["trained_transitions"] == len(grpo.trained)
    assert {t.agent_name for t in grpo.trained} == {"ResearchAgent"}
    assert all(t.prompt_token_ids and t.response_token_ids for t in grpo.trained)
    assert changed


def test_naming_an_agent_the_model_never_reached_stops_before_training(tmp_path: Path) -> None:
    from tether.training.run.health import FitError

    with pytest.raises(FitError, match=r"unknown sub-agent 'WriteAgent'.*captured agents are: ResearchAgent"):
        _step(tmp_path, ["WriteAgent"])
