"""Spans → transitions: one per proxy LLM call, agent names, trainable flags, credit assignment."""

from __future__ import annotations

from typing import Any

import pytest

from tether.transitions import build_transitions, unknown_optimize_names
from tether.types import Rollout, RolloutStatus, Span, SpanKind


def _rollout(reward: float | None = 1.0) -> Rollout:
    return Rollout(rollout_id="ro-1", input="q", task_id="task-1", status=RolloutStatus.SUCCEEDED, reward=reward)


def _llm(seq: int, agent: str | None, content: str = "hi", messages: Any = None) -> Span:
    return Span(
        rollout_id="ro-1",
        attempt_id="at-1",
        kind=SpanKind.LLM,
        name="chat.completions",
        agent_name=agent,
        sequence=seq,
        attributes={
            "call_id": f"c{seq}",
            "request": {"messages": messages or [{"role": "user", "content": f"m{seq}"}], "tools": None},
            "prompt_token_ids": [1, 2, 3],
            "choices": [
                {
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "response_token_ids": [4, 5],
                    "logprobs": [-0.1, -0.2],
                }
            ],
        },
    )


def _span(seq: int, kind: SpanKind, **attrs: Any) -> Span:
    return Span(rollout_id="ro-1", attempt_id="at-1", kind=kind, name=kind.value, sequence=seq, attributes=attrs)


def test_one_transition_per_proxy_call_in_sequence_order() -> None:
    spans = [_llm(2, "b"), _llm(0, "a"), _span(1, SpanKind.TOOL, **{"tool.name": "t", "tool.result": 1})]
    report = build_transitions(_rollout(), spans)
    assert [t.agent_name for t in report.transitions] == ["a", "b"]
    assert [t.step for t in report.transitions] == [0, 1]
    first = report.transitions[0]
    assert first.prompt_token_ids == [1, 2, 3] and first.response_token_ids == [4, 5]
    assert first.logprobs == [-0.1, -0.2] and first.reward == 1.0 and first.trainable
    assert first.messages == [{"role": "user", "content": "m0"}]
    assert report.agent_names == {"a", "b"} and not report.problems


def test_optimize_marks_only_named_agents_trainable() -> None:
    spans = [_llm(0, "write_query"), _llm(1, "check_query"), _llm(2, None)]
    report = build_transitions(_rollout(), spans, optimize=frozenset({"write_query"}))
    assert [t.trainable for t in report.transitions] == [True, False, False]


def test_adapter_llm_span_fills_a_missing_agent_name_by_request() -> None:
    messages = [{"role": "user", "content": "exact request"}]
    adapter_span = _span(0, SpanKind.LLM, **{"request.messages": messages})
    adapter_span.agent_name = "planner"
    report = build_transitions(_rollout(), [adapter_span, _llm(1, None, messages=messages)])
    assert report.transitions[0].agent_name == "planner"


def test_per_call_credit_adds_rewards_emitted_after_each_call() -> None:
    spans = [
        _llm(0, "a"),
        _span(1, SpanKind.REWARD, **{"reward.value": 0.5}),
        _llm(2, "a"),
        _span(3, SpanKind.REWARD, **{"reward.value": -1.0}),
    ]
    episode = build_transitions(_rollout(1.0), spans)
    assert [t.reward for t in episode.transitions] == [1.0, 1.0]
    per_call = build_transitions(_rollout(1.0), spans, credit="per_call")
    assert [t.reward for t in per_call.transitions] == [1.5, 0.0]


def test_tool_error_penalty_hits_the_call_that_requested_the_tool() -> None:
    spans = [
        _llm(0, "a"),
        _span(1, SpanKind.TOOL, **{"tool.name": "div", "tool.error": "ZeroDivisionError"}),
        _llm(2, "a"),
        _span(3, SpanKind.TOOL, **{"tool.name": "div", "tool.result": 2}),
    ]
    report = build_transitions(_rollout(1.0), spans, tool_error_penalty=0.25)
    assert [t.reward for t in report.transitions] == [0.75, 1.0]


def test_rollout_without_llm_calls_is_a_problem_not_an_empty_sample() -> None:
    report = build_transitions(_rollout(), [_span(0, SpanKind.TOOL, **{"tool.name": "t"})])
    assert report.transitions == []
    assert "made no LLM call through tether's endpoint" in report.problems[0]


def test_bad_credit_rule() -> None:
    with pytest.raises(ValueError, match="credit must be 'episode' or 'per_call'"):
        build_transitions(_rollout(), [], credit="sum")  # type: ignore[arg-type]


def test_unknown_optimize_names_message_lists_captured_agents() -> None:
    message = unknown_optimize_names(frozenset({"writer"}), {"write_query", "check_query"})
    assert message == "unknown sub-agent 'writer' in optimize=; captured agents are: check_query, write_query"
    assert unknown_optimize_names(frozenset({"a"}), {"a", "b"}) is None
    assert unknown_optimize_names(None, set()) is None
