"""Turns an attempt's spans into transitions (one per LLM call) and assigns credit.

The proxy's ``llm`` span of a call (``tether.spans.LLM_CALL``, attributes ``ProxyLLMAttributes``) is the
source of truth: it holds the request messages, the response and the token ids exactly as the backend
produced them, and the sub-agent name sent by the adapter in a header. An adapter's own ``llm`` span of the
same call (same request messages) only supplies the agent name when the proxy's is missing.

Credit assignment (``credit=``):

- ``"episode"`` (default): every call gets the rollout's reward.
- ``"per_call"``: every call gets the rollout's reward plus the ``reward`` spans emitted after it and before
  the next call of the attempt (``tether.emit_reward`` from inside the agent).
- ``tool_error_penalty``: subtracted from a call once for each tool it requested that failed (a ``tool``
  span with ``TOOL_ERROR``, attributed to the last call before it). Works with either rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from tether import _json
from tether.spans import (
    ERROR,
    LLM_CALL,
    LLM_CALL_FAILED,
    PASSTHROUGH_CALL,
    POLICY,
    REQUEST_MESSAGES,
    REWARD_VALUE,
    TOOL_ERROR,
    WEIGHTS_VERSION,
    ProxyLLMAttributes,
)
from tether.policies import PolicyMap
from tether.types import Rollout, RolloutStatus, Span, SpanKind, Transition

CreditRule = Literal["episode", "per_call"]


@dataclass(slots=True)
class TransitionReport:
    """What came out of one attempt: its transitions and what was wrong with it, if anything."""

    transitions: list[Transition] = field(default_factory=list)
    agent_names: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def is_proxy_llm_span(span: Span) -> bool:
    return span.kind == SpanKind.LLM and span.name == LLM_CALL and "choices" in span.attributes


def build_transitions(
    rollout: Rollout,
    spans: Sequence[Span],
    *,
    optimize: frozenset[str] | None = None,
    credit: CreditRule = "episode",
    tool_error_penalty: float = 0.0,
    policies: PolicyMap | None = None,
) -> TransitionReport:
    """Transitions of one attempt (its spans in sequence order), with rewards, ``trainable`` flags and
    policies. ``policies`` (the wrapped agent's) decides both; without it ``optimize`` decides what trains."""
    if credit not in ("episode", "per_call"):
        raise ValueError(f"credit must be 'episode' or 'per_call', got {credit!r}")
    report = TransitionReport()
    ordered = sorted(spans, key=lambda s: s.sequence if s.sequence is not None else 0)
    names_by_request = _adapter_agent_names(ordered)
    base_reward = rollout.reward if rollout.reward is not None else 0.0
    current: Transition | None = None
    for span in ordered:
        if is_proxy_llm_span(span):
            current = _transition_from(rollout, span, len(report.transitions), base_reward, names_by_request)
            if policies is not None:
                current.trainable = policies.trains(current.agent_name)
                if current.policy is None:  # (the proxy records it; older spans may lack it)
                    current.policy = policies.policy_of(current.agent_name)
            else:
                current.trainable = optimize is None or (current.agent_name in optimize)
            report.transitions.append(current)
            if current.agent_name:
                report.agent_names.add(current.agent_name)
        elif span.kind == SpanKind.LLM and span.agent_name and span.name != PASSTHROUGH_CALL:
            report.agent_names.add(span.agent_name)  # (a passthrough call is not the policy's)
        elif span.kind == SpanKind.REWARD and credit == "per_call" and current is not None:
            current.reward += float(span.attributes.get(REWARD_VALUE, 0.0))
        elif span.kind == SpanKind.TOOL and tool_error_penalty and current is not None:
            if span.attributes.get(TOOL_ERROR) is not None:
                current.reward -= tool_error_penalty
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


def _transition_from(
    rollout: Rollout, span: Span, step: int, reward: float, names_by_request: dict[bytes, str]
) -> Transition:
    attrs = cast(ProxyLLMAttributes, span.attributes)  # read defensively: a store may hold older spans
    request = attrs.get("request")
    messages = (request.get("messages") if request else None) or []
    choices = attrs.get("choices")
    choice = choices[0] if choices else None
    agent = span.agent_name or names_by_request.get(_request_key(messages))
    return Transition(
        rollout_id=rollout.rollout_id,
        attempt_id=span.attempt_id,
        task_id=rollout.task_id,
        agent_name=agent,
        step=step,
        messages=messages,
        response=(choice.get("message") if choice else None) or {},
        prompt_token_ids=list(attrs.get("prompt_token_ids") or []),
        response_token_ids=list((choice.get("response_token_ids") if choice else None) or []),
        logprobs=choice.get("logprobs") if choice else None,
        reward=reward,
        trainable=False,
        weights_version=_version(span.attributes.get(WEIGHTS_VERSION)),
        policy=_policy(span.attributes.get(POLICY)),
    )


def _policy(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _version(value: Any) -> int | None:
    """The span's weights version as an int (None when absent: a remote backend, or a span stored before
    versions were recorded)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _adapter_agent_names(spans: Iterable[Span]) -> dict[bytes, str]:
    """Agent names from adapters' own llm spans, keyed by their request messages."""
    out: dict[bytes, str] = {}
    for span in spans:
        if (
            span.kind == SpanKind.LLM
            and not is_proxy_llm_span(span)
            and span.agent_name
            and span.name != PASSTHROUGH_CALL
        ):
            messages = span.attributes.get(REQUEST_MESSAGES)
            if messages is not None:
                out[_request_key(messages)] = span.agent_name
    return out


def _request_key(messages: Any) -> bytes:
    try:
        return _json.dumps(messages)
    except TypeError:
        return repr(messages).encode()


def unknown_optimize_names(optimize: frozenset[str] | None, seen: set[str]) -> str | None:
    """A clear message when ``optimize=`` names sub-agents that never appeared, else None."""
    if optimize is None:
        return None
    missing = sorted(optimize - seen)
    if not missing:
        return None
    quoted = ", ".join(f"'{m}'" for m in missing)
    captured = ", ".join(sorted(seen)) or "none (no call carried an agent name)"
    noun = "sub-agent" if len(missing) == 1 else "sub-agents"
    return f"unknown {noun} {quoted} in optimize=; captured agents are: {captured}"
