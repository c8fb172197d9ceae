"""The compact chat template: rendering (Python and the Jinja copy agree), parsing replies, malformed text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.models.embedded import EmbeddedModel, template
from tether.models.hf import parse_hermes, parse_reply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "k": {"type": ["integer", "null"]}},
                "required": ["q"],
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},
]
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "What is 2+3"}, {"type": "text", "text": "?"}]},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}},
            {"id": "b", "type": "function", "function": {"name": "now", "arguments": {}}},
        ],
    },
    {"role": "tool", "tool_call_id": "a", "content": "5"},
    {"role": "tool", "tool_call_id": "b", "content": "noon"},
    {"role": "assistant", "content": "5"},
    {"role": "user", "content": "thanks"},
]


def test_render_is_compact_and_complete() -> None:
    text = template.render(CONVERSATION, TOOLS)
    assert text == (
        "<|system|>Be brief.\ncalc(expr:string): Evaluate arithmetic\nsearch(q:string,k?:integer|null)\nnow()"
        "<|end|><|user|>What is 2+3?<|end|>"
        '<|assistant|>Let me check.<|call|>calc{"expr": "2+3"}<|call|>now{}<|end|>'
        "<|tool|>5<|end|><|tool|>noon<|end|><|assistant|>5<|end|><|user|>thanks<|end|><|assistant|>"
    )
    assert template.render([{"role": "user", "content": "hi"}]) == "<|user|>hi<|end|><|assistant|>"
    assert template.render([{"role": "user", "content": "hi"}], TOOLS[2:]).startswith("<|system|>now()<|end|>")


@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("cut", [1, 2, 4, 6, 7])
def test_jinja_copy_renders_the_same(nano: EmbeddedModel, tools: Any, cut: int) -> None:
    messages = CONVERSATION[:cut]
    expected = template.render(messages, tools)
    got = nano.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert got == expected


def test_segments_mark_only_assistant_output() -> None:
    parts = template.segments(CONVERSATION, TOOLS)
    trained = [text for text, is_output in parts if is_output]
    assert trained == ['Let me check.<|call|>calc{"expr": "2+3"}<|call|>now{}<|end|>', "5<|end|>"]
    assert "".join(t for t, _ in parts) == template.render(CONVERSATION, TOOLS, add_generation_prompt=False)


def test_parse_round_trips_tool_calls() -> None:
    body = 'Checking.<|call|>calc{"expr":"2+3"}<|call|>search{"q":"x","k":2}'
    message = template.parse(body + "<|end|>")
    assert message["content"] == "Checking."
    calls = message["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["calc", "search"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"q": "x", "k": 2}
    assert len({c["id"] for c in calls}) == 2 and all(c["id"].startswith("call_") for c in calls)
    # parse ∘ render is the identity on the assistant text
    rendered = template.render([{"role": "user", "content": "q"}, message], add_generation_prompt=False)
    assert rendered.endswith("<|assistant|>" + body + "<|end|>")
    only_calls = template.parse('<|call|>calc{"expr":"1"}')
    assert only_calls["content"] is None and len(only_calls["tool_calls"]) == 1


@pytest.mark.parametrize(
    "text",
    [
        "<|call|>calc{not json",
        '<|call|>{"expr":"1"}',
        "<|call|>calc[1, 2]",
        '<|call|>calc{"a":1} trailing',
        '<|call|>calc{"a":1}<|call|>',
        "<|call|>",
        "just an answer",
        "",
    ],
)
def test_malformed_call_text_falls_back_to_content(text: str) -> None:
    message = template.parse(text)
    assert message == {"role": "assistant", "content": text}


def test_bad_roles_and_content_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown role 'robot'"):
        template.render([{"role": "robot", "content": "x"}])
    with pytest.raises(TypeError, match="content must be"):
        template.render([{"role": "user", "content": 3}])


def test_hermes_tool_calls() -> None:
    text = 'ok <tool_call>\n{"name": "calc", "arguments": {"expr": "1+1"}}\n</tool_call>'
    message = parse_hermes(text)
    assert message["content"] == "ok"
    assert message["tool_calls"][0]["function"] == {"name": "calc", "arguments": '{"expr": "1+1"}'}
    assert parse_hermes('<tool_call>{"name": "calc", "arguments": {"e": 1}}')["tool_calls"]  # unterminated
    for bad in ("<tool_call>{oops}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>', "plain"):
        assert parse_hermes(bad) == {"role": "assistant", "content": bad}
    assert parse_reply('<|call|>calc{"e":1}')["tool_calls"][0]["function"]["name"] == "calc"
