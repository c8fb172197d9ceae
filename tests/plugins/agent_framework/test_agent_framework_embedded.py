"""One short GRPO step of tether's embedded model through Agent Framework's sequential workflow sample
(fixtures/sequential_agents.py): ``optimize=["reviewer"]`` trains on the reviewer's calls only, while the
writer's calls are captured and sampled by the same model but never trained. The model is untrained: the loop
and what it trains on are checked, not answers."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sequential_agents

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


def test_one_grpo_step_trains_only_the_named_agent(tmp_path: Path) -> None:
    import torch

    from tether.models.embedded import EmbeddedBackend

    backend = EmbeddedBackend(preset="nano", seed=0)
    before = [p.detach().clone() for p in backend.model.parameters()]
    grpo = _GRPO(group_size=4, tasks_per_step=2, lr=1e-3)
    # a reward that varies with what the reviewer wrote, so each group has an advantage to learn from
    agent = tether.wrap(
        sequential_agents.workflow, reward=lambda task, out: len(out["text"]) / 100, optimize=["reviewer"]
    )
    tasks = [sequential_agents.prompt, "Write a tagline for a folding bike."]
    result = tether.Trainer(
        model=backend,
        algorithm=grpo,
        steps=1,
        n_runners=4,
        name="maf",
        run_root=str(tmp_path),
        progress=False,
        sampling={"max_tokens": 8},
    ).fit(agent, tasks)
    (step,) = [h for h in result.history if h["kind"] == "train"]
    assert step["rollouts"] == 8 and step["failed"] == 0, step
    assert step["transitions"] == 16  # the writer's call and the reviewer's, in every rollout
    assert grpo.trained and step["trained_transitions"] == len(grpo.trained) <= 8
    assert {t.agent_name for t in grpo.trained} == {"reviewer"}
    assert all(t.prompt_token_ids and t.response_token_ids for t in grpo.trained)
    assert any(not torch.equal(a, b) for a, b in zip(before, backend.model.parameters(), strict=True))
