"""What the plugins whose frameworks take a text task share: the rule that turns a task into that text, and the
shape of the output they return.

``task_text(task)``: the task itself when it is a string; for a dict, the first string among its ``TASK_KEYS``
(``"task"``, ``"question"``, ``"input"``, ``"prompt"``), else the dict as JSON; anything else, its ``str()``
(a ``Task`` is read through its input). The ``autogen`` and ``openai_agents`` plugins feed tasks this way.

``RunOutput``: a ``dict`` (so the store keeps it as JSON) whose ``"text"`` is the run's final answer, with
``.text`` and ``str(output)`` giving it; each plugin adds its own keys (the ``autogen`` plugin the messages and
the stop reason, the ``crewai`` plugin each task's output) and keeps the framework's own result object as an
attribute. A reward function reads ``output["text"]`` whatever the framework.
"""

from __future__ import annotations

import json
from typing import Any

from tether._json import jsonable
from tether.types import Task

#: the keys of a dict task whose string value is the task's text, in order of preference
TASK_KEYS = ("task", "question", "input", "prompt")


def task_text(task: Any) -> str:
    """The text a framework's run receives for a task input (see the module docstring)."""
    if isinstance(task, Task):
        task = task.input
    if isinstance(task, str):
        return task
    if isinstance(task, dict):
        for key in TASK_KEYS:
            if isinstance(task.get(key), str):
                return str(task[key])
        return json.dumps(jsonable(task), ensure_ascii=False)
    return str(task)


class RunOutput(dict[str, Any]):
    """What an adapter's run returns: a dict with at least ``"text"``, the run's final answer."""

    @property
    def text(self) -> str:
        return str(self.get("text") or "")

    def __str__(self) -> str:
        return self.text
