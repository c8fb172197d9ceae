"""Spans → transitions: one per proxy LLM call, agent names, trainable flags, and the facts credit reads."""

from __future__ import annotations

from typing import Any

from tether import spans
from tether.policies import PolicyMap
from tether.training.signal.transitions import build_transitions, unknown_optimize_names
from tether.types import Rollout, RolloutStatus, Span, SpanKind


def _rollout(reward: float | None = 1.0) -> Rollout:
    return Rollout(rollout_id="ro-1", input="q", task_id="task-1", status=RolloutStatus.SUCCEEDED, reward=reward)


def _llm(
    seq: int, agent: str | None, content: str = "hi", messages: Any = None, weights_version: int | None = None
) -> Span:
    """The proxy's span of one call, built to the schema."""
    attributes: spans.ProxyLLMAttributes = {
        "call_id": f"c{seq}",
        "request": {
            "messages": messages or [{"role": "user", "content": f"m{seq}"}],
            "tools": None,
            "params": {
                "model": "m",
                "temperature": 1.0,
                "top_p": 1.0,
                "max_tokens": None,
                "n": 1,
                "stop": None,
                "seed": None,
                "stream": False,
            },
        },
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "response_token_ids": [4, 5],
                "logprobs": [-0.1, -0.2],
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "model": "m",
        "latency_ms": 1.0,
        "token_ids_available": True,
        "weights_version": weights_version,
    }
    return Span(
        rollout_id="ro-1",
        attempt_id="at-1",
        kind=SpanKind.LLM,
        name=spans.LLM_CALL,
        agent_name=agent,
        sequence=seq,
        attributes=dict(attributes),
    )


def _span(seq: int, kind: SpanKind, attributes: dict[str, Any], agent: str | None = None) -> Span:
    return Span(
        rollout_id="ro-1",
        attempt_id="at-1",
        kind=kind,
        name=kind.value,
        agent_name=agent,
        sequence=seq,
        attributes=attributes,
    )


def test_one_transition_per_proxy_call_in_sequence_order() -> None:
    events = [_llm(2, "b"), _llm(0, "a"), _span(1, SpanKind.TOOL, spans.tool_attributes("t", {}, result=1))]
    report = build_transitions(_rollout(), events)
    assert [t.agent_name for t in report.transitions] == ["a", "b"]
    assert [t.step for t in report.transitions] == [0, 1]
    first = report.transitions[0]
    assert first.prompt_token_ids == [1, 2, 3] and first.response_token_ids == [4, 5]
    assert first.logprobs == [-0.1, -0.2] and first.target_reward == 1.0 and first.trainable
    assert first.weights_version is None
    assert first.messages == [{"role": "user", "content": "m0"}]
    assert report.agent_names == {"a", "b"} and not report.problems


def test_a_transition_carries_the_weights_version_of_its_span() -> None:
    old = _llm(0, "a")
    del old.attributes[spans.WEIGHTS_VERSION]  # a span stored before versions were recorded
    report = build_transitions(_rollout(), [old, _llm(1, "a", weights_version=0), _llm(2, "a", weights_version=7)])
    assert [t.weights_version for t in report.transitions] == [None, 0, 7]


def test_optimize_marks_only_named_agents_trainable() -> None:
    events = [_llm(0, "write_query"), _llm(1, "check_query"), _llm(2, None)]
    report = build_transitions(_rollout(), events, policies=PolicyMap.from_optimize(["write_query"]))
    assert [t.trainable for t in report.transitions] == [True, False, False]


def test_a_call_is_named_by_the_proxy_span_alone() -> None:
    # the name comes from one place (the proxy's span, from the request header): an adapter's own span of the
    # same request names no transition, and only counts its sub-agent as seen
    messages = [{"role": "user", "content": "exact request"}]
    adapter_span = _span(0, SpanKind.LLM, spans.adapter_llm_attributes(messages, model="m"), agent="planner")
    report = build_transitions(_rollout(), [adapter_span, _llm(1, None, messages=messages), _llm(2, "writer")])
    assert [t.agent_name for t in report.transitions] == [None, "writer"]
    assert report.agent_names == {"planner", "writer"}


def test_rewards_emitted_after_each_call_are_recorded_on_it() -> None:
    events = [
        _llm(0, "a"),
        _span(1, SpanKind.REWARD, spans.reward_attributes(0.5)),
        _llm(2, "a"),
        _span(3, SpanKind.REWARD, spans.reward_attributes(-1.0)),
    ]
    report = build_transitions(_rollout(1.0), events)
    assert [(t.step_reward, t.target_reward) for t in report.transitions] == [(0.5, 1.0), (-1.0, 1.0)]
    assert report.emitted_rewards == 2


def test_a_failed_tool_is_recorded_on_the_call_that_requested_it() -> None:
    events = [
        _llm(0, "a"),
        _span(1, SpanKind.TOOL, spans.tool_attributes("div", {"a": 1, "b": 0}, error="ZeroDivisionError")),
        _llm(2, "a"),
        _span(3, SpanKind.TOOL, spans.tool_attributes("div", {"a": 4, "b": 2}, result=2)),
    ]
    report = build_transitions(_rollout(1.0), events)
    assert [t.failed_tools for t in report.transitions] == [1, 0] and report.tool_spans == 2


def test_rollout_without_llm_calls_is_a_problem_not_an_empty_sample() -> None:
    report = build_transitions(_rollout(), [_span(0, SpanKind.TOOL, spans.tool_attributes("t", {}))])
    assert report.transitions == []
    assert "made no LLM call through tether's endpoint" in report.problems[0]


def test_unknown_optimize_names_message_lists_captured_agents() -> None:
    message = unknown_optimize_names(frozenset({"writer"}), {"write_query", "check_query"})
    assert message == "unknown sub-agent 'writer' in optimize=; captured agents are: check_query, write_query"
    assert unknown_optimize_names(frozenset({"a"}), {"a", "b"}) is None
    assert unknown_optimize_names(None, set()) is None
    # in a sample where another optimized sub-agent did call, a missing one may be on a path not taken
    partly = unknown_optimize_names(frozenset({"write_query", "rewrite_query"}), {"write_query"}, rollouts=16)
    assert partly is not None and not partly.startswith("unknown")
    assert "'rewrite_query' in optimize= made no LLM call in 16 rollouts" in partly
    assert unknown_optimize_names(frozenset({"writer"}), {"check_query"}, rollouts=16) == (
        "unknown sub-agent 'writer' in optimize=; captured agents are: check_query"
    )
