"""A scripted judge for tests and demos: a ``FakeLLM`` handler that reads a ``tether.Judge`` request (the task
and each attempt's transcript, ``tether.rewards.judge_prompt``) and answers valid scores from a function.

    with FakeLLM(handler=judge_handler(lambda task, attempt: float("final output: 4" in attempt))) as judge:
        reward = tether.Judge(judge.base_url)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tether.testing.fake_llm import Reply, text

#: score(task, transcript) -> a score in [0, 1]
ScoreFn = Callable[[str, str], float]


def judge_attempts(request: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The task and ``{attempt id: transcript}`` of a judge request."""
    content = str(request["messages"][-1]["content"])
    task = content.split("## Task\n", 1)[1].split("\n\n## ", 1)[0]
    pieces = re.split(r"^## Attempt (t\d+)\n", content, flags=re.MULTILINE)
    attempts: dict[str, str] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        attempts[name] = body.split("\n\nScore each of the", 1)[0].strip()
    return task, attempts


def judge_handler(score: ScoreFn) -> Callable[[dict[str, Any]], Reply]:
    """A ``FakeLLM`` handler that judges each attempt with ``score(task, transcript)``, as JSON text."""

    def handle(request: dict[str, Any]) -> Reply:
        task, attempts = judge_attempts(request)
        scores = [
            {"id": name, "score": (value := float(score(task, body))), "reason": f"scored {value:g} by the script"}
            for name, body in attempts.items()
        ]
        return text(json.dumps({"scores": scores}))

    return handle
