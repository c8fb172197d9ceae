"""The example (``examples/crew_crewai``): ``Trainer.dev`` on the crew as ``train.py`` wraps it."""

from __future__ import annotations

import train
from crewai_script import reply

from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.types import RolloutStatus


def test_trainer_dev_on_the_example() -> None:
    with FakeLLM(handler=reply) as llm:
        report = Trainer(model=llm.base_url).dev(train.wrapped(), train.tasks())
    assert len(report.rollouts) == len(train.TOPICS)
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0, str(rollout)
        assert [(t.agent_name, t.trainable) for t in rollout.transitions] == [
            ("researcher", False),
            ("researcher", False),
            ("writer", True),
        ]
    assert not report.all_problems, report.all_problems
