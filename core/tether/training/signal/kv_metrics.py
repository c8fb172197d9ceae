"""What a local backend's KV cache across a rollout's turns saved (``tether.models.local._kv_cache``), as a
training
step's metrics and a line of the run's summary.

A step's record gets ``kv_calls`` (sampled rows that looked for an earlier call's KV), ``kv_hits`` (those that
found one) and ``kv_reused`` (the share of their prompt tokens taken from it instead of computed); a backend
without the cache (a remote API, vLLM) adds nothing. Torch is never imported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def kv_stats(backend: object) -> dict[str, int] | None:
    """The backend's running KV-cache counters, or None when it has no such cache."""
    read = getattr(backend, "kv_stats", None)
    if not callable(read):
        return None
    stats = read()
    return dict(stats) if isinstance(stats, Mapping) else None


def kv_metrics(before: Mapping[str, int] | None, after: Mapping[str, int] | None) -> dict[str, float]:
    """A step's ``kv_calls``, ``kv_hits`` and ``kv_reused`` from the counters before and after its rollouts
    (empty without a cache, or when the cache is off and nothing was looked up)."""
    if before is None or after is None:
        return {}
    calls = after["calls"] - before["calls"]
    if calls <= 0:
        return {}
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    reused = after["reused_tokens"] - before["reused_tokens"]
    return {
        "kv_calls": float(calls),
        "kv_hits": float(after["hits"] - before["hits"]),
        "kv_reused": reused / prompt if prompt else 0.0,
        "kv_reused_tokens": float(reused),
        "kv_prompt_tokens": float(prompt),
    }


def kv_summary(history: Sequence[Mapping[str, Any]]) -> str | None:
    """``KV cache across turns: 41 % of prompt tokens reused (96 of 128 calls started from an earlier turn)``
    over a run's training steps; None when no step recorded it."""
    steps = [h for h in history if h.get("kind") == "train" and "kv_calls" in h]
    if not steps:
        return None
    calls = sum(int(h["kv_calls"]) for h in steps)
    hits = sum(int(h["kv_hits"]) for h in steps)
    prompt = sum(float(h.get("kv_prompt_tokens", 0.0)) for h in steps)
    reused = sum(float(h.get("kv_reused_tokens", 0.0)) for h in steps)
    share = reused / prompt if prompt else 0.0
    return (
        f"KV cache across turns: {share:.0%} of prompt tokens reused ({hits} of {calls} calls started from an "
        "earlier turn)"
    )
