"""Turns an attempt's spans into transitions (one per LLM call), recording the facts credit is assigned from.

The proxy's ``llm`` span of a call (``tether.spans.LLM_CALL``, attributes ``ProxyLLMAttributes``) is the
source of truth: it holds the request messages, the response and the token ids exactly as the backend
produced them, and the sub-agent name, which comes from one place: the ``X-Tether-Agent`` header the endpoint
redirect sets from the running sub-agent (``tether.capture.context.current_agent_name``). An adapter's own
``llm`` span of a call names no transition; its sub-agent only counts as seen (``agent_names``).

Facts recorded on each transition (``tether.training.signal.credit.assign_credit`` turns them into its ``reward``
and ``advantage``; nothing here sets either):

- ``policy`` and ``trainable``: from the wrapped agent's ``PolicyMap`` (which policy serves the sub-agent, and
  whether it trains).
- ``target`` and ``target_reward``: the call's sub-agent when the ``reward=`` function returned a mapping
  holding it (``REWARD_FINAL`` spans), else its policy when the mapping holds that, with that final reward;
  else no target and the rollout's reward.
- ``step_reward``: the rewards emitted for the call: ``tether.emit_reward(v)`` spans after it and before the
  next call, and ``tether.emit_reward(v, agent=X)`` spans whose latest call of ``X`` (a sub-agent or a
  policy) before them is this one.
- ``failed_tools``: the tools it requested that failed (a ``tool`` span with ``TOOL_ERROR``, attributed to the
  last call before it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.policies import PolicyMap, agent_key
from tether.spans import (
    ERROR,
    LLM_CALL_FAILED,
    PASSTHROUGH_CALL,
    REWARD_FINAL,
    REWARD_TARGET,
    REWARD_VALUE,
    TOOL_ERROR,
    ProxyCall,
    proxy_call,
    proxy_llm_problem,
)
from tether.types import Rollout, RolloutStatus, Span, SpanKind, Transition


@dataclass(slots=True)
class TransitionReport:
    """What came out of one attempt: its transitions and what was wrong with it, if anything."""

    transitions: list[Transition] = field(default_factory=list)
    agent_names: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    #: the final reward of each sub-agent or policy the ``reward=`` mapping named (empty for a number)
    target_rewards: dict[str, float] = field(default_factory=dict)
    #: rewards emitted during the attempt (``tether.emit_reward``)
    emitted_rewards: int = 0
    #: tool spans in the attempt
    tool_spans: int = 0


def build_transitions(
    rollout: Rollout, spans: Sequence[Span], *, policies: PolicyMap | None = None
) -> TransitionReport:
    """Transitions of one attempt (its spans in sequence order) with the facts credit needs. ``policies`` (the
    wrapped agent's) decides each call's policy and whether it trains; None: every call trains."""
    report = TransitionReport()
    ordered = sorted(spans, key=lambda s: s.sequence if s.sequence is not None else 0)
    report.target_rewards = final_rewards(ordered)
    current: Transition | None = None
    for span in ordered:
        call = proxy_call(span)
        if call is not None:
            current = _transition_from(rollout, span, call, len(report.transitions))
            current.trainable = policies is None or policies.trains(current.agent_name)
            if policies is not None and current.policy is None:  # (the proxy records it; older spans may lack it)
                current.policy = policies.policy_of(current.agent_name)
            report.transitions.append(current)
            if current.agent_name:
                report.agent_names.add(current.agent_name)
        elif span.kind == SpanKind.LLM and span.agent_name and span.name != PASSTHROUGH_CALL:
            report.agent_names.add(span.agent_name)  # (a passthrough call is not the policy's)
        elif span.kind == SpanKind.REWARD and not span.attributes.get(REWARD_FINAL):
            report.emitted_rewards += 1
            owner = _reward_owner(report.transitions, span.attributes.get(REWARD_TARGET), current)
            if owner is not None:
                owner.step_reward += float(span.attributes.get(REWARD_VALUE, 0.0))
        elif span.kind == SpanKind.TOOL:
            report.tool_spans += 1
            if current is not None and span.attributes.get(TOOL_ERROR) is not None:
                current.failed_tools += 1
    _set_targets(report, rollout)
    report.problems.extend(p for p in map(proxy_llm_problem, ordered) if p is not None)
    failed = [s for s in ordered if s.kind == SpanKind.LLM and s.name == LLM_CALL_FAILED]
    if failed:
        calls = len(failed) + len(report.transitions)
        report.problems.append(
            f"rollout {rollout.rollout_id}: the model backend failed {len(failed)} of its {calls} LLM call(s): "
            f"{failed[-1].attributes.get(ERROR)}"
        )
    elif not report.transitions and rollout.status == RolloutStatus.SUCCEEDED:
        # (a failed rollout's own error says more than this guess)
        report.problems.append(
            f"rollout {rollout.rollout_id} made no LLM call through tether's endpoint: check that the agent's "
            "model client is an OpenAI-compatible client and that the framework's plugin is installed"
        )
    return report


def final_rewards(spans: Iterable[Span]) -> dict[str, float]:
    """The final reward of each target a ``reward=`` mapping named (its ``REWARD_FINAL`` spans)."""
    out: dict[str, float] = {}
    for span in spans:
        target = span.attributes.get(REWARD_TARGET)
        if span.kind == SpanKind.REWARD and span.attributes.get(REWARD_FINAL) and isinstance(target, str):
            out[target] = float(span.attributes.get(REWARD_VALUE, 0.0))
    return out


def _reward_owner(calls: list[Transition], target: Any, current: Transition | None) -> Transition | None:
    """The call an emitted reward is for: the latest call of its target sub-agent or policy, else the latest
    call (no target); None when there is no such call before it."""
    if not isinstance(target, str) or not target:
        return current
    key = agent_key(target)
    return next((t for t in reversed(calls) if key in (agent_key(t.agent_name), t.policy)), None)


def _set_targets(report: TransitionReport, rollout: Rollout) -> None:
    """Each call's target (its sub-agent, else its policy, when the ``reward=`` mapping names it) and target
    reward (that target's final reward, else the rollout's)."""
    by_key = {agent_key(name): name for name in report.target_rewards}
    for t in report.transitions:
        named = by_key.get(agent_key(t.agent_name)) if t.agent_name is not None else None
        if named is not None:
            t.target = named
        elif t.policy is not None and t.policy in report.target_rewards:
            t.target = t.policy
        t.target_reward = report.target_rewards[t.target] if t.target is not None else rollout.reward


def _transition_from(rollout: Rollout, span: Span, call: ProxyCall, step: int) -> Transition:
    return Transition(
        rollout_id=rollout.rollout_id,
        attempt_id=span.attempt_id,
        task_id=rollout.task_id,
        agent_name=span.agent_name,
        step=step,
        messages=call.messages,
        response=call.message,
        prompt_token_ids=list(call.prompt_token_ids or []),
        response_token_ids=list(call.response_token_ids or []),
        logprobs=call.logprobs,
        reward=0.0,
        trainable=False,
        weights_version=call.weights_version,  # None: a remote backend, or a span stored before versions
        policy=call.policy,
    )


@dataclass(frozen=True, slots=True)
class NameCheck:
    """What the ``optimize=`` check found in a sample of rollouts (``check_optimize_names``)."""

    #: the names that made no call, as a dev report says it ("unknown sub-agent ... in optimize=; ...")
    unknown: str
    #: the same, said of a sample of rollouts ("... made no LLM call in N rollouts ..." when some named
    #: sub-agents did make one; else ``unknown``)
    sampled: str
    #: no sub-agent named in ``optimize=`` made a call: nothing would be trained
    nothing_trained: bool


def check_optimize_names(optimize: frozenset[str] | None, seen: set[str], rollouts: int) -> NameCheck | None:
    """The one ``optimize=`` check: the sub-agents ``seen`` in ``rollouts`` rollouts against the names in
    ``optimize=``; None when every name was seen (or nothing is named)."""
    unknown = unknown_optimize_names(optimize, seen)
    if unknown is None or optimize is None:
        return None
    sampled = unknown_optimize_names(optimize, seen, rollouts=rollouts) or unknown
    return NameCheck(unknown, sampled, nothing_trained=not (optimize & seen))


def unknown_optimize_names(
    optimize: frozenset[str] | None, seen: set[str], *, rollouts: int | None = None
) -> str | None:
    """A clear message when ``optimize=`` names sub-agents that never appeared, else None.

    ``rollouts``: the message is about a sample of that many rollouts (the preflight's, a run's first batch) in
    which some ``optimize=`` names did appear, so a missing one may be on a path they did not take (a conditional
    node) rather than misspelt: it says both, not "unknown".
    """
    if optimize is None:
        return None
    seen_keys = {agent_key(name) for name in seen}
    missing = sorted(name for name in optimize if agent_key(name) not in seen_keys)
    if not missing:
        return None
    quoted = ", ".join(repr(m) for m in missing)
    # repr shows a name's surrounding whitespace, which matching ignores (tether.policies.agent_key)
    captured = ", ".join(n if n == agent_key(n) else repr(n) for n in sorted(seen))
    captured = captured or "none (no call carried an agent name)"
    noun = "sub-agent" if len(missing) == 1 else "sub-agents"
    if rollouts is not None and seen_keys & {agent_key(name) for name in optimize}:
        return (
            f"{noun} {quoted} in optimize= made no LLM call in {rollouts} rollouts (fine for a sub-agent on a "
            f"path they did not take; else a misspelt name); captured agents are: {captured}"
        )
    return f"unknown {noun} {quoted} in optimize=; captured agents are: {captured}"
