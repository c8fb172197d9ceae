"""Spans that agent code emits itself: ``tether.emit_reward`` and ``tether.emit_span``.

They go to the sink of the rollout running in the current context; called outside a rollout they raise,
so a mis-wired agent is noticed instead of silently scoring nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether import spans
from tether.capture.context import current_agent_name, current_sink
from tether.types import SpanKind, check_reward


def _sink_or_raise(what: str) -> Any:
    sink = current_sink.get()
    if sink is None:
        raise RuntimeError(f"tether.{what} was called outside a tether rollout (run the agent via a Trainer)")
    return sink


def emit_reward(value: float, *, agent: str | None = None, name: str = spans.REWARD, **attributes: Any) -> float:
    """Record a reward for the running rollout. Non-numeric or non-finite values raise ``ValueError``.

    ``agent`` names the sub-agent (or policy) the reward is for: under ``credit="per_call"`` it goes to that
    sub-agent's latest call before it; without ``agent`` it goes to the latest call before it, whichever made it.
    Either way the rollout's reward, when ``reward=`` gives none, is the sum of the emitted rewards."""
    reward = check_reward(value)
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise ValueError(
            f"emit_reward(agent=...) takes a sub-agent or policy name (a non-empty string), got {agent!r}"
        )
    sink = _sink_or_raise("emit_reward")
    if agent is not None:
        attributes[spans.REWARD_TARGET] = agent
    attributes = spans.reward_attributes(reward, **attributes)
    sink.emit(SpanKind.REWARD, name, attributes, agent_name=current_agent_name())
    return reward


def record_final_rewards(rewards: Mapping[str, float]) -> float:
    """Record a ``reward=`` function's mapping as one final reward span per target (``REWARD_TARGET``,
    ``REWARD_FINAL``) and return the rollout's reward: the mean of the mapping's values (what evaluation's
    accuracy averages). The runner calls it inside the rollout, after the agent ran."""
    sink = _sink_or_raise("reward=")
    for target, value in rewards.items():
        attributes = spans.reward_attributes(value, **{spans.REWARD_TARGET: target, spans.REWARD_FINAL: True})
        sink.emit(SpanKind.REWARD, spans.REWARD, attributes)
    return sum(rewards.values()) / len(rewards)


def emit_span(name: str, attributes: dict[str, Any] | None = None, *, kind: SpanKind = SpanKind.OTHER) -> None:
    """Record a custom span (kind ``other`` by default) for the running rollout."""
    sink = _sink_or_raise("emit_span")
    sink.emit(SpanKind(kind), name, dict(attributes or {}), agent_name=current_agent_name())
