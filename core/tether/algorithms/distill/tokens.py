"""Whether a teacher reads the student's token ids as the student does: ``tokenizer_mismatch`` compares the two
vocabularies (id → token) and the token ids both chat templates give one probe conversation (system, user, a
tool call, its result, a reply, a user turn, with a tool), and says where they first differ. No torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tether.models.base import ModelBackend, RendersReplies

PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate arithmetic",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]
_CALL = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": "12+7"})}}
#: one conversation of each kind of turn: what both chat templates must turn into the same ids
PROBE: list[dict[str, Any]] = [
    {"role": "system", "content": "Use calc, then answer with the number."},
    {"role": "user", "content": "What is 12+7? Pick a letter, round 3."},
    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "19"},
    {"role": "assistant", "content": "19"},
    {"role": "user", "content": "And 3*4?"},
]


def tokenizer_mismatch(
    student: ModelBackend, teacher: str, *, vocab: Mapping[str, int] | None, render: Any
) -> str | None:
    """Why ``student``'s ids would not mean the same to ``teacher`` (``vocab``: its token → id map, None when
    unknown; ``render(messages, tools)``: its chat template's ids), or None."""
    if not isinstance(student, RendersReplies):
        return no_tokenizer(student)
    mine = vocab_of(student)
    if vocab is not None and mine is not None and dict(vocab) != dict(mine):
        ids = {i: t for t, i in vocab.items()}
        own = {i: t for t, i in mine.items()}
        first = next((i for i in sorted(set(ids) | set(own)) if ids.get(i) != own.get(i)), -1)
        return (
            f"the teacher {teacher} has another tokenizer: {len(vocab)} tokens against the student's {len(mine)}, "
            f"first differing at id {first} ({ids.get(first)!r} against {own.get(first)!r})"
        )
    theirs, ours = list(render(PROBE, PROBE_TOOLS)), list(student.render(PROBE, PROBE_TOOLS))
    if theirs != ours:
        pairs = enumerate(zip(theirs, ours, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(theirs), len(ours)))
        return (
            f"the teacher {teacher} renders a conversation to other token ids than the student (another tokenizer "
            f"or chat template): {len(theirs)} ids against {len(ours)}, first differing at position {at}"
        )
    return None


def no_tokenizer(student: ModelBackend) -> str:
    """The refusal of a student whose tokenizer cannot be compared with a teacher's."""
    return (
        f"the student ({type(student).__name__}) shows no tokenizer and chat template to compare with the "
        "teacher's: Distill's student is model='embedded', 'hf:<path>' or 'smollm2'"
    )


def vocab_of(backend: object) -> Mapping[str, int] | None:
    tokenizer = getattr(backend, "tokenizer", None)
    get = getattr(tokenizer, "get_vocab", None)
    return dict(get()) if callable(get) else None
