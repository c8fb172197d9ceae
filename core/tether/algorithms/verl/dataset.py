"""tether tasks as verl's dataset: parquet files its ``RLHFDataset`` reads, and the task back in the loop.

verl's dataloader reads rows of a parquet file (``prompt`` messages, ``data_source``, ``reward_model``,
``extra_info``) and hands each row's fields to the agent loop as keyword arguments. Each tether task becomes
one row: the whole task (input, id, metadata) as JSON in ``extra_info["tether_task"]``, its position as
``extra_info["index"]``, the agent loop's name in ``agent_name`` (verl runs that loop for the row), and a
``prompt`` with the task's input as text (verl only shows it in its logs: the agent builds its own prompts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.types import Task

DATA_SOURCE = "tether"
#: the name tether's agent loop is registered under in verl, and each dataset row's ``agent_name``
LOOP_NAME = "tether_agent"
TASK_FIELD = "tether_task"


def task_rows(tasks: Sequence[Task], agent_loop: str = LOOP_NAME) -> list[dict[str, Any]]:
    """One verl dataset row per task."""
    rows = []
    for index, task in enumerate(tasks):
        shown = task.input if isinstance(task.input, str) else json.dumps(task.input, default=str)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "agent_name": agent_loop,
                "prompt": [{"role": "user", "content": shown}],
                "reward_model": {"style": "tether", "ground_truth": ""},
                "extra_info": {"index": index, TASK_FIELD: json.dumps(task.to_dict(), default=str)},
            }
        )
    return rows


def write_parquet(tasks: Sequence[Task], path: Path, agent_loop: str = LOOP_NAME) -> Path:
    """Write ``tasks`` as a parquet file verl's dataset reads (needs pandas and pyarrow, verl's own deps)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(task_rows(tasks, agent_loop)).to_parquet(path)
    return path


def task_from(kwargs: Mapping[str, Any]) -> Task:
    """The tether task of the dataset row verl passed to an agent loop's ``run(**kwargs)``."""
    extra = kwargs.get("extra_info")
    raw = extra.get(TASK_FIELD) if isinstance(extra, Mapping) else None
    if not isinstance(raw, str):
        raise ValueError(
            "this verl sample carries no tether task (extra_info['tether_task']): the tether agent loop runs "
            "only on datasets written by tether.VERL"
        )
    return Task.from_dict(json.loads(raw))
