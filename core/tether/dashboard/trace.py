"""One rollout as the dashboard shows it: its attempts, its trace as a tree, its transitions.

The tree of an attempt: consecutive calls of one sub-agent form a group; inside it, each model call (the
proxy's ``llm`` span: messages, response, token counts, token ids and logprobs) holds the tool calls its
response asked for (matched by the tool call id; else the spans' own ``parent_id``); ``reward`` and other
spans stay where they arrived. A framework's own ``llm`` span of a call the proxy also recorded is folded
into the proxy's node (it only names the sub-agent).

Transitions are built and credited exactly as training built and credited them: ``build_transitions`` with
the policy map the rollout's metadata recorded (``spans.POLICIES_METADATA``), then ``assign_credit`` with the
credit rule it recorded (``spans.CREDIT_METADATA``) over its group (the train rollouts of the same task and
resources version: the batch training compared it with), on each member's last attempt, as training did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import _json, spans
from tether.policies import PolicyMap
from tether.spans import is_proxy_llm_span, proxy_llm_problem
from tether.store.base import Store
from tether.training.signal.credit import Credit, assign_credit
from tether.training.signal.transitions import TransitionReport, build_transitions
from tether.types import Attempt, Mode, Rollout, Span, SpanKind, Transition


async def rollout_detail(
    store: Store, rollout_id: str, attempt_id: str | None, group: Sequence[str] = ()
) -> dict[str, Any]:
    """Everything the rollout page shows. ``group``: ids of the rollouts GRPO would compare this one with."""
    rollout = await store.get_rollout(rollout_id)
    attempts = await store.get_attempts(rollout_id)
    chosen = _choose(attempts, attempt_id)
    found = await store.get_spans(chosen.attempt_id) if chosen is not None else []
    policies = recorded_policies(rollout)
    credit = Credit.from_metadata(_meta(rollout).get(spans.CREDIT_METADATA))
    report = build_transitions(rollout, found, policies=policies)
    # training credited train rollouts with a reward, on their last attempt; others show their values only
    trained = rollout.mode == Mode.TRAIN and rollout.reward is not None and chosen is attempts[-1]
    member = _Member.of(rollout, report)
    group_size = await _credit(store, member, group if trained else (), policies, credit or Credit())
    if not trained:
        group_size = 0
        for t in report.transitions:
            t.advantage = None
    return {
        "rollout": rollout.to_dict(),
        "attempts": [a.to_dict() for a in attempts],
        "attempt_id": chosen.attempt_id if chosen is not None else None,
        "tree": build_tree(found),
        "transitions": [
            {
                "step": t.step,
                "agent": t.agent_name,
                "policy": t.policy,
                "trainable": t.trainable,
                "reward": t.reward,
                "advantage": t.advantage,
                "weights_version": t.weights_version,
                "prompt_tokens": len(t.prompt_token_ids),
                "response_tokens": len(t.response_token_ids),
                "has_logprobs": t.logprobs is not None,
            }
            for t in report.transitions
        ],
        "problems": report.problems,
        "optimize": sorted(policies.agents) if policies is not None and policies.agents is not None else None,
        "credit": credit.to_metadata() if credit is not None else None,
        "group_size": group_size,
        "span_count": len(found),
    }


def recorded_policies(rollout: Rollout) -> PolicyMap | None:
    """The policy map the rollout's metadata recorded (or, for a rollout stored by an older tether, its
    ``optimize=`` names); None: every call trains."""
    meta = _meta(rollout)
    policies = PolicyMap.from_metadata(meta.get(spans.POLICIES_METADATA))
    if policies is not None:
        return policies
    names = meta.get(spans.OPTIMIZE_METADATA)
    if isinstance(names, list) and names and all(isinstance(n, str) and n for n in names):
        return PolicyMap.from_optimize(names)
    return None


def _meta(rollout: Rollout) -> dict[str, Any]:
    return rollout.metadata if isinstance(rollout.metadata, dict) else {}


@dataclass(slots=True)
class _Member:
    """A rollout of the group with its last attempt's transitions and facts (``credit.Scored``)."""

    rollout: Rollout
    transitions: list[Transition]
    target_rewards: dict[str, float] = field(default_factory=dict)
    emitted_rewards: int = 0
    tool_spans: int = 0

    @classmethod
    def of(cls, rollout: Rollout, report: TransitionReport) -> _Member:
        return cls(rollout, report.transitions, report.target_rewards, report.emitted_rewards, report.tool_spans)


async def _credit(
    store: Store, member: _Member, group: Sequence[str], policies: PolicyMap | None, credit: Credit
) -> int:
    """Give ``member``'s transitions (its last attempt's) the advantages training gave them: the recorded rule
    over the rollout's group. Returns the group's size."""
    others = [i for i in dict.fromkeys(group) if i != member.rollout.rollout_id]
    members = [member]
    for other in await store.list_rollouts(rollout_ids=others) if others else []:
        if not other.status.finished or other.reward is None:
            continue
        attempts = await store.get_attempts(other.rollout_id)
        found = await store.get_spans(attempts[-1].attempt_id) if attempts else []
        members.append(_Member.of(other, build_transitions(other, found, policies=policies)))
    assign_credit(members, credit)
    return len(members)


def _choose(attempts: Sequence[Attempt], attempt_id: str | None) -> Attempt | None:
    for attempt in attempts:
        if attempt.attempt_id == attempt_id:
            return attempt
    return attempts[-1] if attempts else None


# -- the tree ---------------------------------------------------------------------------------------------


def build_tree(found: Sequence[Span]) -> list[dict[str, Any]]:
    """The attempt's spans as nested nodes (see the module docstring), in arrival order."""
    ordered = sorted(found, key=lambda s: s.sequence if s.sequence is not None else 0)
    proxy_requests = {_key(call.messages) for call in map(spans.proxy_call, ordered) if call is not None}
    nodes: dict[str, dict[str, Any]] = {}
    by_tool_call: dict[str, dict[str, Any]] = {}
    top: list[dict[str, Any]] = []
    for span in ordered:
        if span.kind == SpanKind.LLM and not is_proxy_llm_span(span):
            if _key(span.attributes.get(spans.REQUEST_MESSAGES)) in proxy_requests:
                continue  # the framework's view of a call the proxy recorded: it only adds the agent name
        node = _safe_node(span)
        parent = None
        if span.kind == SpanKind.TOOL:
            parent = by_tool_call.get(str(span.attributes.get(spans.TOOL_CALL_ID)))
        if parent is None and span.parent_id:
            parent = nodes.get(span.parent_id)  # only spans before this one: no span is its own ancestor
        nodes.setdefault(span.span_id, node)
        for call_id in node.get("tool_call_ids", ()):
            by_tool_call[call_id] = node
        if parent is not None:
            parent["children"].append(node)
        else:
            top.append(node)
    return _group_by_agent(top)


def _group_by_agent(top: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for node in top:
        agent = node.get("agent")
        if agent and node["type"] in ("llm", "tool"):
            last = out[-1] if out else None
            if last is not None and last["type"] == "agent" and last["agent"] == agent:
                last["children"].append(node)
            else:
                out.append({"type": "agent", "agent": agent, "children": [node]})
        else:
            out.append(node)
    for group in out:
        if group["type"] == "agent":
            calls = [n for n in group["children"] if n["type"] == "llm"]
            group["llm_calls"] = len(calls)
            group["tool_calls"] = sum(_count_tools(n) for n in group["children"])
    return out


def _count_tools(node: dict[str, Any]) -> int:
    own = 1 if node["type"] == "tool" else 0
    return own + sum(_count_tools(c) for c in node.get("children", ()))


def _safe_node(span: Span) -> dict[str, Any]:
    """``_node``, or for a span whose attributes are not laid out as its kind says, a node showing the problem."""
    problem = proxy_llm_problem(span)
    if problem is None:
        try:
            return _node(span)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            problem = f"span {span.span_id} is malformed ({type(exc).__name__}: {exc})"
    return {
        "span_id": span.span_id, "sequence": span.sequence, "name": span.name, "agent": span.agent_name,
        "start_time": span.start_time, "end_time": span.end_time, "children": [], "type": "other",
        "attributes": span.attributes, "error": problem,
    }  # fmt: skip


def _node(span: Span) -> dict[str, Any]:
    base: dict[str, Any] = {
        "span_id": span.span_id,
        "sequence": span.sequence,
        "name": span.name,
        "agent": span.agent_name,
        "start_time": span.start_time,
        "end_time": span.end_time,
        "children": [],
    }
    a = span.attributes
    call = spans.proxy_call(span)
    if call is not None:
        return {
            **base,
            "type": "llm",
            "model": call.model or call.params.get("model"),
            "messages": call.messages,
            "tools": [_tool_name(t) for t in call.tools or []],
            "params": call.params,
            "response": call.message,
            "finish_reason": call.choice.get("finish_reason"),
            "prompt_tokens": call.usage.get("prompt_tokens"),
            "completion_tokens": call.usage.get("completion_tokens"),
            "latency_ms": call.latency_ms,
            "weights_version": call.weights_version,
            "prompt_token_ids": call.prompt_token_ids,
            "response_token_ids": call.choice.get("response_token_ids"),
            "logprobs": call.choice.get("logprobs"),
            "tool_call_ids": [str(c.get("id")) for c in call.tool_calls if c.get("id")],
        }
    if span.kind == SpanKind.LLM and span.name in (spans.LLM_CALL_FAILED, spans.PASSTHROUGH_CALL):
        # the proxy's record of a call the backend failed, or a judge's call that kept its own endpoint
        request = a.get("request") or {}
        answer = a.get("response")
        choice = ((answer.get("choices") if isinstance(answer, dict) else None) or [{}])[0] or {}
        return {
            **base,
            "type": "llm",
            "framework_only": True,
            "passthrough": bool(a.get(spans.PASSTHROUGH)),
            "url": a.get("url"),
            "model": request.get("model"),
            "messages": request.get("messages") or [],
            "response": choice.get("message") or {},
            "error": a.get(spans.ERROR),
        }
    if span.kind == SpanKind.LLM:  # a framework's own span with no proxy twin (a call that failed, say)
        return {
            **base,
            "type": "llm",
            "framework_only": True,
            "model": a.get(spans.REQUEST_MODEL),
            "messages": a.get(spans.REQUEST_MESSAGES) or [],
            "response": a.get(spans.RESPONSE) or {},
            "error": a.get(spans.ERROR),
            "prompt_tokens": (a.get(spans.USAGE) or {}).get("prompt_tokens"),
            "completion_tokens": (a.get(spans.USAGE) or {}).get("completion_tokens"),
        }
    if span.kind == SpanKind.TOOL:
        error = a.get(spans.TOOL_ERROR)
        return {
            **base,
            "type": "tool",
            "tool": a.get(spans.TOOL_NAME) or span.name,
            "arguments": a.get(spans.TOOL_ARGUMENTS),
            "result": a.get(spans.TOOL_OUTPUT) if error is not None else a.get(spans.TOOL_RESULT),
            "error": error,
            "call_id": a.get(spans.TOOL_CALL_ID),
        }
    if span.kind == SpanKind.REWARD:
        node = {**base, "type": "reward", "value": a.get(spans.REWARD_VALUE)}
        if spans.REWARD_REASON in a:  # a group reward's (tether.Judge): its reason and what it recorded
            node["reason"] = a.get(spans.REWARD_REASON)
            node["details"] = {k: v for k, v in a.items() if k not in (spans.REWARD_VALUE, spans.REWARD_REASON)}
        return node
    return {**base, "type": "other", "attributes": a}


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and function.get("name"):
            return str(function["name"])
        if tool.get("name"):
            return str(tool["name"])
    return "?"


def _key(messages: Any) -> bytes:
    try:
        return _json.dumps(messages)
    except TypeError:
        return repr(messages).encode()
