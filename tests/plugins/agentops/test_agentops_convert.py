"""AgentOps span attributes → tether span: kinds, messages folded back from ``gen_ai.prompt.*``, tool
arguments, agent names (pure functions, no AgentOps needed)."""

from __future__ import annotations

from tether import spans
from tether.types import SpanKind
from tether_agentops.convert import agent_name_of, convert, is_tool_call_request, kind_of


def test_llm_span_messages_are_rebuilt_in_order() -> None:
    attrs = {
        "gen_ai.system": "OpenAI",
        "gen_ai.request.model": "m",
        "gen_ai.prompt.10.role": "user",
        "gen_ai.prompt.10.content": "last",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "first",
        "gen_ai.prompt.2.role": "assistant",
        "gen_ai.prompt.2.tool_calls.0.id": "c1",
        "gen_ai.prompt.2.tool_calls.0.name": "calc",
        "gen_ai.prompt.2.tool_calls.0.arguments": "{}",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "done",
        "gen_ai.usage.prompt_tokens": 3,
    }
    out = convert("openai.chat.completion", attrs, None)
    assert out.kind == SpanKind.LLM
    assert [m.get("content") for m in out.attributes[spans.REQUEST_MESSAGES]] == ["first", None, "last"]
    assert out.attributes[spans.REQUEST_MESSAGES][1]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    ]
    assert out.attributes[spans.RESPONSE] == {"role": "assistant", "content": "done"}
    assert out.attributes["usage"] == {"prompt_tokens": 3}
    assert out.attributes[spans.REQUEST_MODEL] == "m"


def test_tool_spans_from_the_decorator_and_their_errors() -> None:
    attrs = {
        "agentops.span.kind": "tool",
        "operation.name": "search",
        "agentops.tool.input": '{"args": ["q"], "kwargs": {"k": 2}}',
        "agentops.tool.output": "[1, 2]",
    }
    out = convert("search.tool", attrs, None)
    assert (out.kind, out.name) == (SpanKind.TOOL, "search")
    assert out.attributes[spans.TOOL_ARGUMENTS] == {"args": ["q"], "kwargs": {"k": 2}}
    assert out.attributes[spans.TOOL_RESULT] == "[1, 2]"
    failed = convert("search.tool", attrs, "KeyError: 'x'")
    assert failed.attributes[spans.TOOL_ERROR] == "KeyError: 'x'"


def test_other_spans_keep_their_attributes_and_kinds_are_normalised() -> None:
    out = convert("plan.task", {"agentops.span.kind": "task", "tags": ("a", "b")}, "boom")
    assert out.kind == SpanKind.OTHER
    assert out.attributes == {"agentops.span.kind": "task", "tags": ["a", "b"], "error": "boom"}
    assert kind_of({"agentops.span.kind": "AgentOpsSpanKindValues.TOOL"}) == "tool"
    request = {"agentops.span.kind": "AgentOpsSpanKindValues.TOOL", "tool.name": "c", "tool.call.id": "1"}
    assert is_tool_call_request(request)
    assert not is_tool_call_request({"agentops.span.kind": "tool", "operation.name": "c"})


def test_agent_names() -> None:
    assert agent_name_of("x.agent", {"agentops.span.kind": "agent", "operation.name": "solver"}) == "solver"
    assert agent_name_of("solver.agent", {"agentops.span.kind": "agent"}) == "solver"
    assert agent_name_of("llm", {"agent.name": "triage"}) == "triage"
    assert agent_name_of("t.task", {"agentops.span.kind": "task", "operation.name": "t"}) is None
