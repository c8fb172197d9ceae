"""Spans that agent code emits itself: ``tether.emit_reward`` and ``tether.emit_span``.

They go to the sink of the rollout running in the current context; called outside a rollout they raise,
so a mis-wired agent is noticed instead of silently scoring nothing.
"""

from __future__ import annotations

from typing import Any

from tether import spans
from tether.context import current_agent_name, current_sink
from tether.types import SpanKind, check_reward


def _sink_or_raise(what: str) -> Any:
    sink = current_sink.get()
    if sink is None:
        raise RuntimeError(f"tether.{what} was called outside a tether rollout (run the agent via a Trainer)")
    return sink


def emit_reward(value: float, *, name: str = spans.REWARD, **attributes: Any) -> float:
    """Record a reward for the running rollout. Non-numeric or non-finite values raise ``ValueError``."""
    reward = check_reward(value)
    sink = _sink_or_raise("emit_reward")
    attributes = spans.reward_attributes(reward, **attributes)
    sink.emit(SpanKind.REWARD, name, attributes, agent_name=current_agent_name())
    return reward


def emit_span(name: str, attributes: dict[str, Any] | None = None, *, kind: SpanKind = SpanKind.OTHER) -> None:
    """Record a custom span (kind ``other`` by default) for the running rollout."""
    sink = _sink_or_raise("emit_span")
    sink.emit(SpanKind(kind), name, dict(attributes or {}), agent_name=current_agent_name())
