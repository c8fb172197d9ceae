"""A rollout as a judge reads it: the text of what tether captured (each model call's new messages, the tool
calls and their results, the final output), with what the group shares (the system prompt, the task) left out
of each rollout's text and shown once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether import _json
from tether.rewards.base import Member
from tether.spans import proxy_call

#: the most characters of one message (or tool result, or output) a transcript keeps
CLIP_CHARS = 1500


@dataclass(frozen=True, slots=True)
class Shared:
    """What every rollout of the group shares: the task and the first call's system prompt (None when the
    rollouts' system prompts differ: each transcript then shows its own)."""

    task: str
    system: str | None


def shared_of(task: Any, members: Sequence[Member]) -> Shared:
    firsts = {_first_system(m) for m in members}
    system = next(iter(firsts)) if len(firsts) == 1 else None
    return Shared(clip(_text(task)), system)


def transcript(member: Member, shared: Shared) -> str:
    """The member's trajectory as lines of text (see the module docstring)."""
    lines: list[str] = []
    seen: dict[str, list[Any]] = {}  # each sub-agent's messages already shown
    for span in sorted(member.spans, key=lambda s: s.sequence if s.sequence is not None else 0):
        call = proxy_call(span)
        if call is None:
            continue
        agent = span.agent_name or "agent"
        who = f"[{agent}] " if agent != "agent" else ""
        before = seen.get(agent, [])
        messages = call.messages
        new = messages[len(before) :] if messages[: len(before)] == before else messages
        for message in new:
            line = _message_line(message, shared)
            if line is not None:
                lines.append(who + line)
        reply = call.message
        lines.append(who + _assistant_line(reply))
        seen[agent] = [*messages, reply]
    lines.append(f"final output: {clip(_text(member.output))}")
    return "\n".join(lines)


def _message_line(message: dict[str, Any], shared: Shared) -> str | None:
    role = message.get("role")
    content = _content(message.get("content"))
    if role == "system":
        return None if content == shared.system else f"system: {clip(content)}"
    if role == "user":
        return None if content.strip() == shared.task.strip() else f"user: {clip(content)}"
    if role == "tool":
        return f"tool result: {clip(content)}"
    if role == "assistant":
        return _assistant_line(message)
    return f"{role}: {clip(content)}"


def _assistant_line(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    said = [
        f"{(c.get('function') or {}).get('name')}({clip(str((c.get('function') or {}).get('arguments')), 300)})"
        for c in calls
        if isinstance(c, dict)
    ]
    content = _content(message.get("content"))
    parts = [f"assistant: {clip(content)}"] if content.strip() else []
    if said:
        parts.append("calls tool " + ", ".join(said))
    return " · ".join(parts) or "assistant: (empty reply)"


def _first_system(member: Member) -> str | None:
    for span in sorted(member.spans, key=lambda s: s.sequence if s.sequence is not None else 0):
        call = proxy_call(span)
        if call is not None:
            systems = [_content(m.get("content")) for m in call.messages if m.get("role") == "system"]
            return systems[0] if systems else None
    return None


def _content(content: Any) -> str:
    """A message's text (the text parts of a list of content parts)."""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return _json.dumps(_json.jsonable(value)).decode()
    except TypeError:
        return repr(value)


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
