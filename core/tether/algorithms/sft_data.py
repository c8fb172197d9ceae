"""What ``tether.SFT`` trains on: the LLM calls of finished rollouts in a store (imported traces or captured
runs), selected by a filter, and their tokenization by the model being trained.

A rollout is kept when it succeeded, is not an algorithm's record, its reward is at least ``min_reward`` (a
rollout without a reward fails that test) and each ``feedback`` value is at least its threshold; a feedback
value is read from the rollout's metadata, else from the first of its spans carrying an attribute of that
name. Of a kept rollout, every LLM call with a reply is an example, or only those of the sub-agents in
``agents``. Calls recorded with token ids keep them; the others (imported traces have none) are tokenized with
the model's chat template. No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import spans as span_names
from tether.models.base import RendersReplies
from tether.policies import agent_key
from tether.spans import proxy_call
from tether.store.base import Store
from tether.training.signal.transitions import build_transitions
from tether.types import Rollout, RolloutStatus, Span


@dataclass(frozen=True, slots=True)
class Filter:
    """Which rollouts and calls train (see the module docstring)."""

    min_reward: float | None = None
    feedback: Mapping[str, float] = field(default_factory=dict)
    agents: frozenset[str] | None = None

    def keeps(self, rollout: Rollout, spans: Sequence[Span]) -> bool:
        """Whether ``rollout`` (with its last attempt's ``spans``) passes the reward and feedback tests."""
        if rollout.status != RolloutStatus.SUCCEEDED or span_names.RECORD_METADATA in rollout.metadata:
            return False
        if self.min_reward is not None and (rollout.reward is None or rollout.reward < self.min_reward):
            return False
        for name, threshold in self.feedback.items():
            value = feedback_value(rollout, spans, name)
            if value is None or value < threshold:
                return False
        return True


def feedback_value(rollout: Rollout, spans: Sequence[Span], name: str) -> float | None:
    """The rollout's numeric feedback ``name``: its metadata's, else the first span attribute of that name."""
    candidates = [rollout.metadata.get(name), *(s.attributes.get(name) for s in spans)]
    for value in candidates:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


@dataclass(slots=True)
class Example:
    """One LLM call to imitate: its request and reply, and the token ids (empty until tokenized)."""

    rollout_id: str
    agent_name: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    imported: bool


@dataclass(slots=True)
class Selection:
    """The examples of the kept rollouts, and counts for the run's metrics."""

    examples: list[Example]
    rollouts_seen: int
    rollouts_kept: int
    agent_names: set[str]


def examples_of(rollout: Rollout, spans: Sequence[Span]) -> list[Example]:
    """The calls of one attempt (its spans) that have a reply, with their sub-agent names."""
    ordered = sorted(spans, key=lambda s: s.sequence if s.sequence is not None else 0)
    calls = [(s, call) for s in ordered if (call := proxy_call(s)) is not None]
    transitions = build_transitions(rollout, ordered).transitions  # one per call, same order: agent names
    out = []
    for (span, call), t in zip(calls, transitions, strict=True):
        if not t.response:
            continue
        out.append(
            Example(
                rollout_id=rollout.rollout_id,
                agent_name=t.agent_name,
                messages=list(t.messages),
                tools=call.tools,
                reply=dict(t.response),
                prompt_token_ids=t.prompt_token_ids,
                response_token_ids=t.response_token_ids,
                imported=bool(span.attributes.get(span_names.IMPORTED)),
            )
        )
    return out


def select(items: Sequence[tuple[Rollout, list[Span]]], rule: Filter) -> Selection:
    """The examples of ``items`` (rollouts with their last attempt's spans) that ``rule`` keeps.

    ``ValueError`` when ``rule.agents`` names a sub-agent that no succeeded rollout has (listing those that
    appear) or when nothing is selected (saying how many rollouts each test let through).
    """
    considered = [
        (r, s)
        for r, s in items
        if r.status == RolloutStatus.SUCCEEDED and span_names.RECORD_METADATA not in r.metadata
    ]
    per_rollout = [(r, s, examples_of(r, s)) for r, s in considered]
    names = {e.agent_name for _, _, found in per_rollout for e in found if e.agent_name}
    if rule.agents is not None:
        found_keys = {agent_key(n) for n in names}
        missing = sorted(a for a in rule.agents if agent_key(a) not in found_keys)
        if missing:
            captured = ", ".join(sorted(names)) or "none (no call carried an agent name)"
            raise ValueError(
                f"unknown sub-agent{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} in "
                f"SFT(agents=...); the agents in the store's rollouts are: {captured}"
            )
    kept = [(r, found) for r, s, found in per_rollout if rule.keeps(r, s)]
    wanted = None if rule.agents is None else {agent_key(a) for a in rule.agents}
    examples = [e for _, found in kept for e in found if wanted is None or agent_key(e.agent_name) in wanted]
    if not examples:
        raise ValueError(
            f"SFT selected no LLM call: {len(items)} rollouts in the store, {len(considered)} succeeded, "
            f"{len(kept)} passed min_reward={rule.min_reward} and feedback={dict(rule.feedback)}"
            + (f", none of their calls by agents {sorted(rule.agents)}" if rule.agents is not None else "")
            + ": lower the thresholds, or import or capture rollouts first"
        )
    return Selection(examples, len(items), len(kept), names)


async def read_finished(store: Store) -> list[tuple[Rollout, list[Span]]]:
    """Every succeeded rollout of ``store`` with its last attempt's spans (the store keeps them), in an order
    that depends on what the rollouts are, not on when they finished or how the store lists them
    (``stable_order``): what trains on them (a seeded shuffle, a tokenizer fitted to them) then repeats."""
    out = []
    for rollout in stable_order(await store.list_rollouts(status=RolloutStatus.SUCCEEDED)):
        attempts = await store.get_attempts(rollout.rollout_id)
        found = await store.get_spans(attempts[-1].attempt_id) if attempts else []
        out.append((rollout, found))
    return out


def stable_order(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """``rollouts`` sorted by their seed (``tether.seed``: from the run seed, the task and the sample's place),
    then their task's input; rollouts alike in both (imported traces carry no seed) keep the store's order."""

    def key(rollout: Rollout) -> tuple[bool, int, str]:
        found = rollout.metadata.get(span_names.SEED_METADATA)
        seed = found if isinstance(found, int) and not isinstance(found, bool) else None
        try:
            task = json.dumps(rollout.input, sort_keys=True, default=repr)
        except (TypeError, ValueError):  # (a circular input)
            task = repr(rollout.input)
        return (seed is None, seed or 0, task)

    return sorted(rollouts, key=key)


def tokenize(examples: Sequence[Example], backend: RendersReplies, *, retokenize: bool = False) -> int:
    """Fill in the token ids of the examples that have none (all of them with ``retokenize``) with the
    backend's chat template; returns how many were tokenized here."""
    done = 0
    for e in examples:
        if retokenize or not e.prompt_token_ids or not e.response_token_ids:
            e.prompt_token_ids = backend.render(e.messages, e.tools)
            e.response_token_ids = backend.render_reply(e.messages, e.tools, e.reply)
            done += 1
    return done
