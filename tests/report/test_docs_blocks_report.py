"""docs/metrics.md's block runs here (tox env ``report``, where TensorBoard and W&B are installed): the Trainer
it builds takes both sinks, as ``fit`` will send them its rows (``test_report.py`` reads those rows back).
``tests/core/top/test_docs_blocks.py`` checks every docs block is run somewhere or marked not run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "top"))

from docblocks import run_block

import tether


def test_report_to_tensorboard_and_wandb_is_built_as_written() -> None:
    ns = run_block("metrics.md:1", {"tether": tether})
    trainer = ns["trainer"]
    assert isinstance(trainer.algorithm, tether.GRPO)
    assert list(trainer.report_to) == ["tensorboard", "wandb"]
