"""The judge's prompt, its reply's JSON schema, and the reading of a reply into scores.

The judge sees the rubric, the task and the shared system prompt once, then each rollout's transcript under an
id (``t1``, ``t2``, ...), and answers ``{"scores": [{"id", "score", "reason"}, ...]}``: every id once, each
score a number in [0, 1], each reason one line. ``PROMPT_VERSION`` names this text; it is recorded on every
judgement and is part of the cache key, so a changed prompt is never answered from an old cache.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from tether.rewards.transcript import Shared, clip

PROMPT_VERSION = "tether-judge/1"

DEFAULT_RUBRIC = (
    "Did the agent achieve the user's goal correctly and efficiently? Correctness comes first: a wrong, "
    "missing or made-up result scores low however it was reached. Among attempts that reach the goal, fewer "
    "wasted steps and failed tool calls score higher."
)

SYSTEM = (
    "You are a strict, fair judge of an AI agent. You are shown one task and several attempts the agent made "
    "at it: for each, the messages it wrote, the tools it called with their results, and its final output. "
    "Compare the attempts with each other and score each from 0 to 1 by the rubric: 1 for an attempt that "
    "fully meets it, 0 for one that fails it; a better attempt gets a higher score than a worse one, and "
    "attempts of equal quality get equal scores. Give each a one-line reason. Reply with JSON only, in this "
    'form: {"scores": [{"id": "t1", "score": 0.8, "reason": "..."}, ...]}, with every attempt\'s id exactly '
    "once."
)

#: the reply's schema, sent as ``response_format`` where the endpoint takes it
SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "judge_scores",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "scores": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "score": {"type": "number"},
                            "reason": {"type": "string"},
                        },
                        "required": ["id", "score", "reason"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["scores"],
            "additionalProperties": False,
        },
    },
}

_REASON_CHARS = 240


def ids(count: int) -> list[str]:
    return [f"t{i + 1}" for i in range(count)]


def messages(rubric: str | None, shared: Shared, transcripts: Sequence[str]) -> list[dict[str, Any]]:
    """The judge's chat messages for a group whose transcripts are given in the order of ``ids``."""
    parts = [f"## Rubric\n{rubric or DEFAULT_RUBRIC}", f"## Task\n{shared.task}"]
    if shared.system:
        parts.append(f"## The agent's system prompt (the same in every attempt)\n{clip(shared.system)}")
    for name, text in zip(ids(len(transcripts)), transcripts, strict=True):
        parts.append(f"## Attempt {name}\n{text}")
    parts.append(f"Score each of the {len(transcripts)} attempts ({', '.join(ids(len(transcripts)))}) as JSON.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def parse(reply: str | None, expected: Sequence[str]) -> dict[str, tuple[float, str]]:
    """``{id: (score, reason)}`` from a reply (JSON, or JSON inside text or a code fence); ``ValueError``
    saying what is wrong with it otherwise."""
    data = _json_in(reply or "")
    entries = data.get("scores") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError('the reply has no "scores" list')
    out: dict[str, tuple[float, str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"a score is not an object: {entry!r}")
        name, score, reason = entry.get("id"), entry.get("score"), entry.get("reason", "")
        if not isinstance(name, str) or name not in expected:
            raise ValueError(f"unknown attempt id {name!r} (the ids are {', '.join(expected)})")
        if name in out:
            raise ValueError(f"attempt {name} is scored twice")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ValueError(f"attempt {name}'s score is not a number: {score!r}")
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"attempt {name}'s score {score!r} is outside [0, 1]")
        text = " ".join(str(reason).split())
        out[name] = (float(score), clip(text, _REASON_CHARS))
    missing = [name for name in expected if name not in out]
    if missing:
        raise ValueError(f"attempts {', '.join(missing)} are not scored")
    return out


def _json_in(text: str) -> Any:
    """The JSON value in ``text``: all of it, else a fenced block, else from the first ``{`` to the last ``}``."""
    candidates = [text.strip()]
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        candidates.append(fenced.group(1).strip())
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError("the reply is not JSON")
