"""A sub-agent's system message optimized in flight: APO rewrites it, the proxy swaps it into the calls.

For an agent that does not read its prompts from resources, ``tether.APO(system_message_of="check_query")``
takes the exact system message that sub-agent sends (captured from a first batch of rollouts) as its starting
template, and each candidate rides in a resources version as one prompt template (named
``system_message[check_query]``, a label only) whose rule is data: ``PromptTemplate.system_message_of`` (the
sub-agent) and ``PromptTemplate.replaces`` (the captured text, never rewritten), which a rewrite keeps
(``dataclasses.replace``), so the rule is exact.

The template has no placeholders: the text's own braces are doubled (``escape``), so ``template.format()``
gives the text back. The runner reads the rule of a rollout's resources (``rule_of``, from those fields) and
opens the attempt on the proxy with it; the proxy replaces, in that sub-agent's calls only, a system message
equal to the captured text with the candidate (``replace``), before the model sees the request. Calls whose
system message differs, and other sub-agents' calls, are left alone. The proxy's span records the messages
the model saw and, under ``spans.SYSTEM_MESSAGE_REPLACED``, the original text, so training data stay exact.

The proxy knows a call's sub-agent from the request's ``X-Tether-Agent`` header (set by tether's endpoint
redirect from the running sub-agent's name): a call that reaches the proxy without it is never rewritten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.types import PromptTemplate, Span

if TYPE_CHECKING:
    from tether.models.base import ChatRequest

_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Replacement:
    """Replace ``original`` (exact text) with ``text`` in the system messages of one sub-agent's calls."""

    original: str
    text: str
    prompt: str  # the prompt template's name in resources


#: sub-agent name -> its replacement, for one rollout (its resources version)
Rule = Mapping[str, Replacement]


def prompt_name(agent: str) -> str:
    """The name (a label: the rule is in the template's fields) of ``agent``'s system-message template."""
    return f"system_message[{agent}]"


def escape(text: str) -> PromptTemplate:
    """An f-string template without placeholders whose ``format()`` is ``text``."""
    return PromptTemplate(text.replace("{", "{{").replace("}", "}}"))


def templates(agent: str, captured: str) -> dict[str, PromptTemplate]:
    """The template that starts the search of ``agent``'s system message: the captured text, as the rule's
    original and as the first candidate."""
    start = escape(captured)
    return {prompt_name(agent): PromptTemplate(start.template, system_message_of=agent, replaces=captured)}


def rule_of(prompts: Mapping[str, PromptTemplate]) -> dict[str, Replacement]:
    """The replacements a resources version asks for (empty when it has no system-message template); a
    candidate equal to the captured text is left out (nothing to replace)."""
    rule: dict[str, Replacement] = {}
    for name, template in prompts.items():
        agent, original = template.system_message_of, template.replaces
        if agent is None or original is None:
            continue
        text = template.format()
        if text != original:
            rule[agent] = Replacement(original, text, name)
    return rule


def replace(messages: Sequence[Any], replacement: Replacement) -> tuple[list[Any], list[int]] | None:
    """``messages`` with every system (or developer) message whose text is exactly ``replacement.original``
    replaced by ``replacement.text``, and the indices replaced; None when none matched (nothing changes)."""
    out: list[Any] | None = None
    replaced: list[int] = []
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") in _ROLES:
            if _text(message.get("content")) == replacement.original:
                out = list(messages) if out is None else out
                out[i] = {**message, "content": replacement.text}
                replaced.append(i)
    return None if out is None else (out, replaced)


def swap_in(rule: Rule | None, agent: str | None, chat: ChatRequest) -> tuple[Replacement, list[int]] | None:
    """Swap ``agent``'s candidate system message of ``rule`` (an attempt's) into ``chat`` when its system
    message is the captured one; the replacement and the indices replaced, else None (``chat`` unchanged)."""
    replacement = rule.get(agent) if rule and agent else None
    if replacement is None:
        return None
    swapped = replace(chat.messages, replacement)
    if swapped is None:
        return None
    chat.messages = swapped[0]
    return replacement, swapped[1]


def mark(span: Span, replacement: Replacement, indices: Iterable[int]) -> None:
    """Make the proxy span of a rewritten call hold what the model saw, and say what was replaced."""
    from tether import spans

    call = spans.proxy_call(span)
    messages = call.messages if call is not None else []
    for i in indices:
        if i < len(messages) and isinstance(messages[i], dict):
            messages[i]["content"] = replacement.text
    span.attributes[spans.SYSTEM_MESSAGE_REPLACED] = {
        "prompt": replacement.prompt,
        "messages": list(indices),
        "original": replacement.original,
    }


def captured_system_message(spans_of_rollouts: Iterable[Iterable[Span]], agent: str) -> tuple[str, int]:
    """The system message ``agent``'s calls sent most often in these rollouts' proxy spans, and how many
    distinct ones there were; ``ValueError`` naming the sub-agents seen when ``agent`` made no call with one."""
    from tether.policies import agent_key
    from tether.spans import proxy_call

    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for rollout_spans in spans_of_rollouts:
        for span in rollout_spans:
            call = proxy_call(span)
            if call is None:
                continue
            if span.agent_name:
                seen.add(span.agent_name)
            if agent_key(span.agent_name) != agent_key(agent):
                continue
            for message in call.messages:
                if isinstance(message, dict) and message.get("role") in _ROLES:
                    text = _text(message.get("content"))
                    if text is not None:
                        counts[text] += 1
                    break
    if not counts:
        names = ", ".join(repr(n) for n in sorted(seen)) or "none (no call named its sub-agent)"
        raise ValueError(
            f"APO(system_message_of={agent!r}): no call of sub-agent {agent!r} with a system message was "
            f"captured in the first rollouts; the sub-agents seen are: {names}"
        )
    text, _ = counts.most_common(1)[0]
    return text, len(counts)


def _text(content: Any) -> str | None:
    """A message's text: the string, or the text parts of a content list joined; None otherwise."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return None
