"""When a running attempt counts as dead, and why its late spans are refused: the rule every backend shares
(``tether.store.memory``, ``tether.store.sqlite._lifecycle``, ``tether.store.postgres._ops``)."""

from __future__ import annotations

from tether.types import Attempt, Rollout


def timed_out_span(name: str, attempt_id: str, reason: str | None) -> str:
    """Why a span of a timed-out attempt is refused. Shared by the backends."""
    return (
        f"span {name!r}: attempt {attempt_id} timed out ({reason or 'no reason recorded'}): its worker was "
        "presumed dead and its rollout moved on, so spans of it are refused"
    )


def stale_reason(rollout: Rollout, attempt: Attempt, now: float) -> str | None:
    """Why a running attempt counts as dead at ``now``, or None if it is alive. Shared by the backends."""
    if rollout.timeout_s is not None and now - attempt.started_at > rollout.timeout_s:
        return f"attempt timed out after {rollout.timeout_s:g} s"
    if rollout.heartbeat_timeout_s is not None and now - attempt.last_heartbeat_at > rollout.heartbeat_timeout_s:
        return f"no heartbeat for {rollout.heartbeat_timeout_s:g} s"
    return None
