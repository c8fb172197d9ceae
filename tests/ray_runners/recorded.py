"""What two runs of the same rollouts must record alike, whatever ran them (in-process runners or Ray actors):
per task, the status, output, reward and attempts, every span (order, kind, name, agent, attributes, which LLM
call a tool span answers) and the transitions built — less what differs between any two runs (clocks, call
ids, which are replaced by the call's position, and the ``output_ids`` keys a framework fills with fresh ids)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tether import spans

#: what differs between two runs of the same calls: clocks (call ids are replaced by the call's position)
VOLATILE = frozenset({"latency_ms", "start_time", "end_time"})


def scrub(value: Any, calls: dict[str, str], volatile: frozenset[str] = VOLATILE) -> Any:
    """``value`` without the ``volatile`` keys, every call id replaced by ``calls[id]``."""
    if isinstance(value, dict):
        return {k: scrub(v, calls, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [scrub(v, calls, volatile) for v in value]
    return calls.get(value, value) if isinstance(value, str) else value


def recorded(report: Iterable[Any], *, output_ids: frozenset[str] = frozenset()) -> dict[Any, Any]:
    """Per task (a dict task by its JSON): what a run recorded, comparable with ``==`` across runs."""
    out = {}
    for r in report:
        calls = {s.attributes["call_id"]: f"call#{i}" for i, s in enumerate(r.spans) if s.name == spans.LLM_CALL}
        task = r.rollout.input
        key = json.dumps(task, sort_keys=True) if isinstance(task, dict | list) else task
        out[key] = (
            r.status,
            scrub(r.output, calls, output_ids),
            r.reward,
            r.attempts,
            [(s.sequence, s.kind, s.name, s.agent_name, scrub(s.attributes, calls)) for s in r.spans],
            [(t.prompt_token_ids, t.response_token_ids, t.agent_name, t.reward) for t in r.transitions],
        )
    return out
