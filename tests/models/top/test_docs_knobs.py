"""docs/models.md's table of "the knobs that matter, and their defaults" states the defaults the code has: each
row's default cell, as the page writes it, and the dataclass defaults it stands for (``GRPO``, ``LoRA`` and
``Trainer`` need torch for ``GRPO``: tox env ``embedded``). A changed default fails here until the row says it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import tether

PAGE = Path(__file__).resolve().parents[3] / "docs" / "models.md"

#: the row's knob cell -> (its default cell, the code's defaults that cell states)
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "`GRPO(lr=)`": ("by what trains (below)", {"GRPO.lr": None}),
    "`GRPO(lora=tether.LoRA(r=16, alpha=32))`": (
        "None: all weights",
        {"GRPO.lora": None, "LoRA.r": 16, "LoRA.alpha": 32},
    ),
    "`tether.LoRA(layers=10)`": ("None: every decoder layer", {"LoRA.layers": None}),
    "`GRPO(group_size=8, tasks_per_step=8)`": (
        "64 rollouts a step",
        {"GRPO.group_size": 8, "GRPO.tasks_per_step": 8},
    ),
    "`GRPO(temperature=1.0)`": ("1.0", {"GRPO.temperature": 1.0}),
    "`GRPO(micro_batch=32, micro_batch_tokens=None)`": (
        "32 rows",
        {"GRPO.micro_batch": 32, "GRPO.micro_batch_tokens": None},
    ),
    "`GRPO(gradient_checkpointing=False)`": ("off", {"GRPO.gradient_checkpointing": False}),
    "`GRPO(kl_coef=0.0)`": ("off", {"GRPO.kl_coef": 0.0}),
    "`Trainer(steps=, eval_every=5)`": ("", {"Trainer.eval_every": 5}),
    '`Trainer(eval_sampled="ends")`': ('`"ends"`', {"Trainer.eval_sampled": "ends"}),
}


def _table() -> dict[str, str]:
    """knob cell -> default cell, from the page's table."""
    section = PAGE.read_text().split("## The knobs that matter, and their defaults", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line[:2] == "| "
    ]
    return {row[0]: row[1] for row in rows[2:]}  # (after the header and its rule)


def _default(name: str) -> Any:
    cls, field = name.split(".")
    (found,) = [f for f in dataclasses.fields(getattr(tether, cls)) if f.name == field]
    return found.default


@pytest.mark.parametrize("knob", sorted(ROWS))
def test_the_knob_rows_defaults_are_the_codes(knob: str) -> None:
    cell, defaults = ROWS[knob]
    table = _table()
    assert knob in table, f"docs/models.md's knobs table has no row {knob}: update this test's ROWS"
    assert table[knob] == cell, f"the row {knob} now says {table[knob]!r}: check it against the code, then ROWS"
    for name, value in defaults.items():
        assert _default(name) == value, f"{name} defaults to {_default(name)!r}; docs/models.md says {cell!r}"


def test_64_rollouts_a_step_is_the_product() -> None:
    assert _default("GRPO.group_size") * _default("GRPO.tasks_per_step") == 64
