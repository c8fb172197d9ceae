"""The embedded model's chat template: OpenAI messages and tool schemas → compact text, and generated text →
an OpenAI assistant message (plain content or ``tool_calls``).

The format (every marker is one token; the model is tiny, so context is precious)::

    <|system|>You add numbers.
    calc(expr:string): Evaluate an arithmetic expression<|end|>
    <|user|>What is 2+3?<|end|>
    <|assistant|><|call|>calc{"expr":"2+3"}<|end|>
    <|tool|>5<|end|>
    <|assistant|>5<|end|>

Tool schemas follow the system text, one per line: ``name(arg:type,optional?:type): description``. An
assistant turn is its content followed by its calls, each ``<|call|>name{json arguments}``. Tool results
are rendered in order (their ``tool_call_id`` is implied by position). This module needs no torch; the same
template is stored as Jinja in the checkpoint's tokenizer config, but this renderer is authoritative.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL = "<|tool|>"
END = "<|end|>"
CALL = "<|call|>"
PAD = "<|pad|>"

#: tokens that end a turn: generation stops when the model samples any of them
TURN_TOKENS = (END, SYSTEM, USER, ASSISTANT, TOOL)
#: all markers; CALL is not "special" so that ``decode(ids, skip_special_tokens=True)`` keeps it
MARKERS = (*TURN_TOKENS, CALL, PAD)

_ROLE_MARKER = {"system": SYSTEM, "developer": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL}
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def content_text(content: Any) -> str:
    """OpenAI message content (str, None or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise TypeError(f"message content must be a string, null or a list of parts, got {type(content).__name__}")


def render_tool(tool: dict[str, Any]) -> str:
    """One tool schema as ``name(arg:type,opt?:type): description``."""
    fn = tool.get("function", tool)
    params = fn.get("parameters") or {}
    required = set(params.get("required") or ())
    args = []
    for name, schema in (params.get("properties") or {}).items():
        kind = schema.get("type", "any") if isinstance(schema, dict) else "any"
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind)
        args.append(f"{name}{'' if name in required else '?'}:{kind}")
    desc = fn.get("description") or ""
    return f"{fn['name']}({','.join(args)})" + (f": {desc}" if desc else "")


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _assistant_body(message: dict[str, Any]) -> str:
    body = content_text(message.get("content"))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        body += f"{CALL}{fn['name']}{_arguments_text(fn.get('arguments', '{}'))}"
    return body


def segments(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
) -> list[tuple[str, bool]]:
    """The rendered conversation as ``(text, is_assistant_output)`` pieces; joined they are ``render(...)``.

    The assistant pieces are what the model generates (body and end marker): SFT puts its loss on them.
    """
    msgs = list(messages)
    out: list[tuple[str, bool]] = []
    system_parts = []
    if msgs and msgs[0].get("role") in ("system", "developer"):
        system_parts.append(content_text(msgs.pop(0).get("content")))
    if tools:
        system_parts.append("\n".join(render_tool(t) for t in tools))
    if system_parts:
        out.append((SYSTEM + "\n".join(system_parts) + END, False))
    for i, message in enumerate(msgs):
        role = message.get("role")
        marker = _ROLE_MARKER.get(role or "")
        if marker is None:
            raise ValueError(f"message {i} has unknown role {role!r}: use system, user, assistant or tool")
        if role == "assistant":
            out.append((ASSISTANT, False))
            out.append((reply_text(message), True))
        else:
            out.append((marker + content_text(message.get("content")) + END, False))
    if add_generation_prompt:
        out.append((ASSISTANT, False))
    return out


def render(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for ``messages`` (and ``tools``), ending with the assistant marker by default."""
    return "".join(text for text, _ in segments(messages, tools, add_generation_prompt=add_generation_prompt))


def reply_text(message: dict[str, Any]) -> str:
    """What the model generates for an assistant ``message`` after the ``<|assistant|>`` marker: its body
    (content, then each call) and the end marker."""
    return _assistant_body(message) + END


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def parse(text: str) -> dict[str, Any]:
    """Generated assistant text → OpenAI assistant message. Malformed call text is returned as content."""
    text = text.removesuffix(END)
    head, *calls = text.split(CALL)
    if not calls:
        return {"role": "assistant", "content": text}
    tool_calls = []
    for raw in calls:
        match = _NAME.match(raw)
        if match is None:
            return {"role": "assistant", "content": text}
        arguments = raw[match.end() :]
        try:
            value = json.loads(arguments)
        except ValueError:
            return {"role": "assistant", "content": text}
        if not isinstance(value, dict):
            return {"role": "assistant", "content": text}
        tool_calls.append(
            {"id": new_call_id(), "type": "function", "function": {"name": match.group(), "arguments": arguments}}
        )
    return {"role": "assistant", "content": head or None, "tool_calls": tool_calls}


# The same format in Jinja, stored as the tokenizer's chat_template so that plain transformers users (and
# the hf: backend) render exactly what ``render`` does.
JINJA = (
    "{%- macro text(c) -%}{%- if c is string -%}{{ c }}{%- elif c -%}{%- for p in c -%}"
    "{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}"
    "{%- set ns = namespace(start=0, sys=false) -%}"
    "{%- if messages and messages[0].role in ['system', 'developer'] -%}{%- set ns.start = 1 -%}"
    "{%- set ns.sys = true -%}{%- endif -%}"
    "{%- if ns.sys or tools -%}" + SYSTEM + "{%- if ns.sys -%}{{ text(messages[0].content) }}{%- endif -%}"
    "{%- if ns.sys and tools -%}{{ '\\n' }}{%- endif -%}"
    "{%- for t in tools or [] -%}{%- set f = t.function if t.function is defined else t -%}"
    "{%- set p = f.parameters if f.parameters is defined and f.parameters else {} -%}"
    "{%- set req = p.required if p.required is defined and p.required else [] -%}"
    "{%- if not loop.first -%}{{ '\\n' }}{%- endif -%}{{ f.name }}("
    "{%- for k, v in (p.properties if p.properties is defined and p.properties else {}).items() -%}"
    "{%- if not loop.first -%},{%- endif -%}{{ k }}{%- if k not in req -%}?{%- endif -%}:"
    "{%- set ty = v.type if v is mapping and v.type is defined else 'any' -%}"
    "{%- if ty is string -%}{{ ty }}{%- else -%}{{ ty | join('|') }}{%- endif -%}"
    "{%- endfor -%})"
    "{%- if f.description is defined and f.description -%}: {{ f.description }}{%- endif -%}"
    "{%- endfor -%}" + END + "{%- endif -%}"
    "{%- for m in messages[ns.start:] -%}"
    "{%- if m.role == 'assistant' -%}" + ASSISTANT + "{{ text(m.content) }}"
    "{%- for c in m.tool_calls or [] -%}{%- set f = c.function if c.function is defined else c -%}"
    + CALL
    + "{{ f.name }}{%- if f.arguments is string -%}{{ f.arguments }}"
    "{%- else -%}{{ f.arguments | tojson(separators=(',', ':')) }}{%- endif -%}{%- endfor -%}" + END + ""
    "{%- elif m.role in ['system', 'developer'] -%}" + SYSTEM + "{{ text(m.content) }}" + END + ""
    "{%- elif m.role == 'user' -%}" + USER + "{{ text(m.content) }}" + END + ""
    "{%- elif m.role == 'tool' -%}" + TOOL + "{{ text(m.content) }}" + END + ""
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}" + ASSISTANT + "{%- endif -%}"
)


def sample_texts() -> Iterable[str]:
    """Rendered example turns, mixed into the tokenizer corpus so markers and JSON punctuation merge well."""
    tool = {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
    for a, b in ((12, 7), (3, 45), (100, 2)):
        expr = f"{a}+{b}"
        yield render(
            [
                {"role": "system", "content": "You are a helpful assistant. Use tools when they help."},
                {"role": "user", "content": f"What is {expr}?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "function": {
                                "name": "calc",
                                "arguments": json.dumps({"expr": expr}, separators=(",", ":")),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": str(a + b)},
                {"role": "assistant", "content": f"The answer is {a + b}."},
            ],
            [tool],
            add_generation_prompt=False,
        )
