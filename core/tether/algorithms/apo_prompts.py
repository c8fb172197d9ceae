"""The text side of APO: rollouts rendered as traces, the optimizer's critique and rewrite requests, and the
checks a rewritten template must pass before it is scored.

A trace shows the whole multi-turn rollout from its spans, in the order they arrived: the system prompt once,
then for each LLM call the new messages it was sent (user text, tool results) and what the model answered
(text and tool calls), then tool calls the model never saw the result of, the agent's output and its reward.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from tether import spans as schema
from tether.spans import proxy_call
from tether.types import PromptTemplate, Rollout, Span, SpanKind

CRITIC_SYSTEM = (
    "You improve the prompts of an LLM agent. You are shown the agent's prompt templates and traces of "
    "rollouts that scored low: every model call, every tool call and result, the final output and its reward. "
    "Find what in the prompts made the agent fail, and say concretely what the prompt should tell it instead."
)
CRITIQUE_REQUEST = "Explain in a few sentences why the agent failed and how the template {name!r} should change."
REWRITE_SYSTEM = (
    "You rewrite one prompt template of an LLM agent following a critique. Keep every placeholder of the "
    "template exactly as written ({fields}) and keep its syntax ({engine}). Reply with the new template only, "
    "between <prompt> and </prompt>."
)
REWRITE_REQUEST = "Write a new version of the template {name!r} that fixes these problems."

_PIECE_CHARS = 600
_TRACE_CHARS = 4000


def template_fields(template: PromptTemplate) -> set[str]:
    """The placeholder names of a template; ``ValueError`` if it does not parse."""
    if template.engine == "jinja":
        import jinja2
        import jinja2.meta

        try:
            return set(jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template.template)))
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"invalid jinja template: {exc}") from None
    fields: set[str] = set()
    for _, name, _, _ in string.Formatter().parse(template.template):
        if name is not None:
            if not name:
                raise ValueError("positional placeholders {} are not allowed: name them, e.g. {office}")
            fields.add(re.split(r"[.\[]", name, maxsplit=1)[0])
    return fields


def check_rewrite(old: PromptTemplate, new_text: str) -> str | None:
    """Why ``new_text`` cannot replace ``old`` (None when it can): empty, unparsable, or other placeholders."""
    if not new_text.strip():
        return "the optimizer returned an empty template"
    try:
        new_fields = template_fields(PromptTemplate(new_text, old.engine))
    except ValueError as exc:
        return str(exc)
    old_fields = template_fields(old)
    if new_fields != old_fields:
        return (
            f"placeholders changed: expected {sorted(old_fields)}, got {sorted(new_fields)} "
            "(a rewrite must keep the template's placeholders)"
        )
    return None


def parse_rewrite(reply: str) -> str:
    """The template in the optimizer's reply: between <prompt> tags, else the reply without code fences."""
    match = re.search(r"<prompt>(.*?)(?:</prompt>|$)", reply, flags=re.S)
    text = match.group(1) if match else reply
    fenced = re.fullmatch(r"\s*```[\w-]*\n(.*?)\n?```\s*", text, flags=re.S)
    return (fenced.group(1) if fenced else text).strip()


def render_templates(prompts: Mapping[str, PromptTemplate]) -> str:
    """The templates as the optimizer sees them (a system message's rule, ``PromptTemplate.replaces``, is not
    shown: it is not a prompt)."""
    return "\n\n".join(f"Template {name!r} ({t.engine}):\n{t.template}" for name, t in prompts.items())


def critique_messages(
    prompts: Mapping[str, PromptTemplate], name: str, traces: Sequence[str], batch_score: float
) -> list[dict[str, str]]:
    body = (
        f"{render_templates(prompts)}\n\nMean reward on this batch: {batch_score:.3f}. "
        f"Low-scoring rollouts:\n\n" + "\n\n".join(f"## Rollout {i + 1}\n{t}" for i, t in enumerate(traces))
    )
    return [
        {"role": "system", "content": CRITIC_SYSTEM},
        {"role": "user", "content": f"{body}\n\n{CRITIQUE_REQUEST.format(name=name)}"},
    ]


def rewrite_messages(template: PromptTemplate, name: str, critique: str) -> list[dict[str, str]]:
    fields = ", ".join(sorted(template_fields(template))) or "none"
    system = REWRITE_SYSTEM.format(fields=fields, engine=template.engine)
    user = (
        f"Template {name!r}:\n<prompt>{template.template}</prompt>\n\nCritique:\n{critique}\n\n"
        f"{REWRITE_REQUEST.format(name=name)}"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_trace(rollout: Rollout, spans: Sequence[Span]) -> str:
    """One rollout as text: every LLM call with the messages new to it and its answer, tool calls whose result
    the model never saw, then output (or error) and reward."""
    lines: list[str] = []
    seen: dict[str | None, int] = {}  # messages already shown, per sub-agent (each has its own conversation)
    ordered = sorted(spans, key=lambda s: s.sequence if s.sequence is not None else 0)
    sent_back = _tool_ids_sent_back(ordered)  # tool results shown as the model saw them, in its requests
    calls = 0
    for span in ordered:
        call = proxy_call(span)
        if call is not None:
            calls += 1
            messages = call.messages
            done = seen.get(span.agent_name, 0)
            for message in messages[done:] if len(messages) >= done else messages:
                if message.get("role") == "assistant":
                    continue  # the model's own earlier answers are shown where it gave them
                lines.append(f"[{message.get('role')}] {_clip(_content(message.get('content')))}")
            who = f" ({span.agent_name})" if span.agent_name else ""
            lines.append(f"[assistant, call {calls}{who}] {_clip(_answer(call.message))}")
            seen[span.agent_name] = len(messages) + 1  # the answer comes back in the next request
        elif span.kind == SpanKind.TOOL and span.attributes.get(schema.TOOL_CALL_ID) not in sent_back:
            attrs = span.attributes
            outcome = (
                attrs.get(schema.TOOL_ERROR)
                if attrs.get(schema.TOOL_ERROR) is not None
                else attrs.get(schema.TOOL_RESULT)
            )
            label = "error" if attrs.get(schema.TOOL_ERROR) is not None else "result"
            name, arguments = attrs.get(schema.TOOL_NAME, span.name), _json(attrs.get(schema.TOOL_ARGUMENTS))
            lines.append(f"[tool {name}] arguments {arguments} → {label}: {_clip(_content(outcome))}")
    if not calls:
        lines.append("(no model call was captured)")
    if rollout.error:
        lines.append(f"[error] {_clip(rollout.error.strip().splitlines()[-1])}")
    else:
        lines.append(f"[output] {_clip(_json(rollout.output))}")
    lines.append(f"[reward] {rollout.reward if rollout.reward is not None else 0.0}")
    text = "\n".join(lines)
    return text if len(text) <= _TRACE_CHARS else text[: _TRACE_CHARS // 2] + "\n…\n" + text[-_TRACE_CHARS // 2 :]


def _tool_ids_sent_back(spans: Sequence[Span]) -> set[str]:
    ids: set[str] = set()
    for span in spans:
        call = proxy_call(span)
        if call is not None:
            for message in call.messages:
                if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
                    ids.add(message["tool_call_id"])
    return ids


def _answer(message: Mapping[str, Any]) -> str:
    parts = [_content(message.get("content"))] if message.get("content") else []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(f"calls {fn.get('name')}({fn.get('arguments')})")
    return "; ".join(parts) or "(empty answer)"


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _clip(text: str) -> str:
    return text if len(text) <= _PIECE_CHARS else text[:_PIECE_CHARS] + "…"
