"""GRPO's update of one step when each policy has its own weights (``tether.wrap(optimize={policy: [...]})``).

The step's trainable transitions are grouped by ``Transition.policy``; every trained policy with transitions
gets one update inside ``backend.policy(name)`` (its own weights and optimizer), staleness measured against
that policy's own weights version. Metrics come back per policy as ``<metric>/<policy>`` beside the step's
totals under today's names (counts summed, rates weighted by response tokens, maxima taken), so the progress
line and single-policy dashboards read the same. The frozen policy and policies this GRPO does not train
(``GRPO.policies``) are never updated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether.models.base import PolicyVersions, TrainableBackend
from tether.policies import DEFAULT_POLICY, FROZEN_POLICY, PolicyMap
from tether.types import Transition

#: metrics summed over policies; ``_MAXIMA`` take the largest; the rest are weighted by response tokens
_SUMS = (
    "trained_transitions",
    "stale_dropped",
    "drift_tokens",
    "drift_refused",
    "response_tokens",
    "micro_batches",
    "loss",
    "sequences",
    "tokens_trained",
    "tokens_shared",
    "tokens_computed",
    "tokens_saved",
    "teacher_tokens",  # (tether.Distill's)
    "teacher_s",
)
_MAXIMA = ("grad_norm", "drift_max", "lr")


def trained_policies(chosen: Sequence[str] | None, policies: PolicyMap) -> list[str] | None:
    """The policies an algorithm updates, in the agent's order; None when one shared policy trains (today's
    single update). ValueError naming the agent's policies for a name it does not have."""
    if policies.shared:
        if chosen is not None and list(chosen) != [DEFAULT_POLICY]:
            raise ValueError(
                f"policies={list(chosen)} names policies, but the agent has one shared policy: wrap it with "
                "optimize={policy: [sub-agents]} to give each policy its own weights"
            )
        return None
    if chosen is None:
        return policies.names
    unknown = [name for name in chosen if name not in policies.policies]
    if unknown:
        hint = " (the frozen sub-agents never train)" if FROZEN_POLICY in unknown else ""
        raise ValueError(f"policies= names {unknown}, not policies of the agent: it has {policies.names}{hint}")
    return [name for name in policies.names if name in chosen]


def update_policies(
    update: Callable[..., dict[str, float]],
    backend: TrainableBackend,
    trainable: Sequence[Transition],
    names: Sequence[str],
    pad_token_id: int,
) -> dict[str, float]:
    """One ``update`` (an algorithm's: ``PolicyUpdate.update``'s signature) per policy in ``names`` that has
    transitions; the step's metrics (totals and per policy)."""
    if not isinstance(backend, PolicyVersions):
        raise ValueError(
            f"training one set of weights per policy needs a backend that holds them (model='embedded', "
            f"'hf:<path>' or 'vllm:<model>' with LoRA); the {type(backend).__name__} is no "
            "tether.models.base.PolicyVersions"
        )
    per_policy: dict[str, dict[str, float]] = {}
    for name in names:
        mine = [t for t in trainable if t.policy == name]
        if not mine:
            per_policy[name] = {"trained_transitions": 0.0}
            continue
        with backend.policy(name) as model:  # this policy's version: bumped when the block ends
            per_policy[name] = update(
                model,
                mine,
                pad_token_id=pad_token_id,
                weights_version=backend.weights_version_of(name),
                policy=name,
            )
    return merge_metrics(per_policy)


def _weight(key: str) -> str:
    """The token count a rate is averaged over: drift figures over the tokens it measured."""
    return "drift_tokens" if key.startswith("drift_") else "response_tokens"


def merge_metrics(per_policy: dict[str, dict[str, float]]) -> dict[str, float]:
    """Totals under the single-policy names plus every policy's metrics as ``<metric>/<policy>``."""
    out: dict[str, float] = {key: 0.0 for key in ("trained_transitions", "stale_dropped", "loss", "grad_norm")}
    weighted: dict[str, float] = {}
    for metrics in per_policy.values():
        for key, value in metrics.items():
            if key in _SUMS:
                out[key] = out.get(key, 0.0) + value
            elif key in _MAXIMA:
                out[key] = max(out.get(key, 0.0), value)
            else:
                weighted[key] = weighted.get(key, 0.0) + value * metrics.get(_weight(key), 0.0)
    for key, value in weighted.items():
        tokens = sum(m.get(_weight(key), 0.0) for m in per_policy.values())
        out[key] = value / tokens if tokens else 0.0
    for name, metrics in per_policy.items():
        for key, value in metrics.items():
            out[f"{key}/{name}"] = value
    return out
