"""Issue 37 item 4: the trainer's counts are checked when it is built, not after a step: ``eval_every=0`` used
to pass and crash GRPO after step 1 with no checkpoint."""

from __future__ import annotations

from typing import Any

import pytest

import tether


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("eval_every", 0, r"eval_every=\.\.\.\) must be an int >= 1 \(steps between evaluations"),
        ("eval_every", 2.5, r"eval_every=\.\.\.\) must be an int >= 1"),
        ("steps", 0, r"steps=\.\.\.\) must be an int >= 1 \(training steps\)"),
        ("steps", True, r"steps=\.\.\.\) must be an int >= 1"),
        ("n_runners", 0, r"n_runners=\.\.\.\) must be an int >= 1"),
        ("max_attempts", 0, r"max_attempts=\.\.\.\) must be an int >= 1"),
        ("timeout_s", 0, r"timeout_s=\.\.\.\) must be a number of seconds > 0"),
        ("heartbeat_timeout_s", -1.0, r"heartbeat_timeout_s=\.\.\.\) must be a number of seconds > 0"),
    ],
)
def test_counts_out_of_range_are_refused_when_the_trainer_is_built(setting: str, value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        tether.Trainer(**{setting: value})


def test_counts_in_range_are_accepted() -> None:
    tether.Trainer(steps=1, eval_every=100, n_runners=1, max_attempts=1, timeout_s=0.5, heartbeat_timeout_s=None)
