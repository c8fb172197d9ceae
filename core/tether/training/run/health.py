"""Whether a run is training anything, and why not: what ``fit`` says instead of looking like success.

``FitError`` is what ``Trainer.fit`` raises when its preflight finds a problem or when steps train nothing
several times running. ``unknown_reward_targets`` checks a ``reward=`` mapping's names against the agent;
``idle_reason`` says, for a batch whose credit assignment left nothing to train, why (and what to change);
``top_errors`` counts the failed rollouts' errors; ``log_failures`` keeps every one of them in the run
folder's ``failures.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tether.policies import PolicyMap
from tether.training.signal.credit import CreditStats
from tether.types import Rollout, RolloutStatus, Transition

FAILURES_FILE = "failures.jsonl"
#: the fix for a batch whose every group scored the same
FLAT_FIX = "rewards must vary within a task's group — check the reward, raise group_size or the temperature"


class _Result(Protocol):
    """A finished rollout of a batch (``tether.training.signal.batch.RolloutResult``)."""

    @property
    def rollout(self) -> Rollout: ...

    @property
    def transitions(self) -> list[Transition]: ...

    @property
    def problems(self) -> list[str]: ...

    @property
    def succeeded(self) -> bool: ...


class FitError(RuntimeError):
    """``Trainer.fit`` stopped because it would train nothing: the message names the cause and the fix."""


def check_idle_limit(value: object) -> None:
    """``stop_after_idle_steps`` must be an int >= 1 or None; ``ValueError`` naming the fix otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"stop_after_idle_steps must be an int >= 1 or None (never stop), got {value!r}")


def last_line(text: str | None) -> str:
    """The last line of an error's traceback (its type and message)."""
    lines = (text or "").strip().splitlines()
    return lines[-1].strip() if lines else "unknown error"


def is_reward_error(text: str | None) -> bool:
    """Whether a rollout failed because its ``reward=`` function raised (``tether.types.RewardError``)."""
    return "RewardError: " in last_line(text)


def unknown_targets(
    targets: Iterable[str], agent_names: set[str], policies: PolicyMap, optimize: frozenset[str] | None
) -> list[str]:
    """The names of a ``reward=`` mapping that are neither a sub-agent (captured in the rollout or named in
    ``optimize=``) nor a policy, sorted."""
    known_agents = set(agent_names) | set(optimize or ())
    known_policies = set(policies.names) if not policies.shared else set()
    return sorted(t for t in targets if t not in known_agents and t not in known_policies)


def unknown_reward_targets(
    targets: Iterable[str], agent_names: set[str], policies: PolicyMap, optimize: frozenset[str] | None
) -> str | None:
    """The error for a ``reward=`` mapping that names neither a sub-agent (captured in the rollout or named
    in ``optimize=``) nor a policy, naming the known ones; None when every name is known."""
    unknown = unknown_targets(targets, agent_names, policies, optimize)
    if not unknown:
        return None
    known_agents = set(agent_names) | set(optimize or ())
    known_policies = set(policies.names) if not policies.shared else set()
    noun = "sub-agent or policy" if known_policies else "sub-agent"
    quoted = ", ".join(repr(name) for name in unknown)
    text = f"unknown {noun} {quoted} in reward=; captured agents are: {', '.join(sorted(known_agents)) or 'none'}"
    if known_policies:
        text += f"; policies are: {', '.join(sorted(known_policies))}"
    return text


def top_errors(rollouts: Iterable[Rollout], limit: int = 3) -> list[tuple[str, int]]:
    """The commonest last lines of the failed rollouts' errors, with their counts."""
    counts = Counter(last_line(r.error) for r in rollouts if r.status == RolloutStatus.FAILED)
    return counts.most_common(limit)


def idle_reason(results: Sequence[_Result], stats: CreditStats) -> str:
    """Why a training batch (its results) gave the update nothing to train on, with the fix."""
    if not results:
        return "the step ran no rollout"
    failed = [r.rollout for r in results if not r.succeeded]
    if len(failed) == len(results):
        (error, _), *_ = top_errors(failed, 1)
        fix = "fix the reward function" if is_reward_error(failed[0].error) else "see failures.jsonl"
        return f"every rollout failed ({len(failed)} of {len(results)}): {error} — {fix}"
    scored = [r for r in results if r.succeeded]
    if all(r.rollout.reward is None for r in scored):
        return (
            "no rollout has a reward: pass reward=(task, output) -> float to tether.wrap or call "
            "tether.emit_reward in the agent"
        )
    if not any(r.transitions for r in scored):
        problems = "; ".join(dict.fromkeys(p for r in scored for p in r.problems)) or "no LLM call was captured"
        return f"no transition was built: {problems}"
    if not any(t.trainable for r in scored for t in r.transitions):
        return "no call is trained: optimize= names no sub-agent these rollouts called"
    if stats.groups and stats.flat_groups == stats.groups:
        return f"every group scored the same ({stats.flat_groups} of {stats.groups} flat): {FLAT_FIX}"
    return "no transition had a non-zero advantage"


def log_failures(path: Path, batch_rollouts: Sequence[Rollout], phase: str | None = None) -> int:
    """Append every failed rollout of a batch to ``path`` (``failures.jsonl``); returns how many."""
    failed = [r for r in batch_rollouts if r.status == RolloutStatus.FAILED]
    if not failed:
        return 0
    with path.open("a") as f:
        for r in failed:
            row: dict[str, Any] = {
                "time": time.time(),
                "rollout_id": r.rollout_id,
                "task_id": r.task_id,
                "mode": r.mode.value,
                "error": r.error,
            }
            if phase is not None:
                row["phase"] = phase
            f.write(json.dumps(row) + "\n")
    return len(failed)


def read_top_failures(path: Path, limit: int = 3) -> tuple[int, list[tuple[str, int]]]:
    """How many failures ``failures.jsonl`` holds and its commonest errors (last lines)."""
    if not path.exists():
        return 0, []
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        if line.strip():
            counts[last_line(json.loads(line).get("error"))] += 1
    return sum(counts.values()), counts.most_common(limit)
