"""Exact trajectory packing: the calls of one rollout that extend each other, exactly, trained as one sequence.

A multi-turn rollout's calls share their history: call 2's prompt is usually call 1's prompt, call 1's reply
and what came back (a tool's result, the user's next message). Trained as one row each, that history is
computed once per call. ``pack_calls`` merges consecutive calls of one rollout attempt on the same policy
into one ``PackedSequence`` when, and only when, the next call's prompt token ids begin with the previous
call's prompt + response ids exactly (compared as ids, never as text): the sequence is then the first call's
prompt and response, then each next call's new prompt suffix and response, and each call keeps its own
response span (``PackedCall``) for its mask, advantage and recorded logprobs. In a causal model the
positions of a call's response see exactly the tokens its own row would, so the loss and its gradient are
the per-call batch's. Anything else starts a new sequence: a template that re-renders the history, a reply
the agent post-processed before sending it back, another sub-agent's call in between, a sequence that would
outgrow the model's context.

Pure Python (no torch): ``tether.algorithms.batching`` turns sequences into tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.types import Transition


@dataclass(frozen=True)
class PackedCall:
    """One call's response inside a ``PackedSequence``."""

    index: int  #: the call's index in the batch (the transitions given to ``pack_calls``)
    start: int  #: position in ``token_ids`` of the call's first response token
    end: int  #: one past its last response token


@dataclass(frozen=True)
class PackedSequence:
    """The first call's prompt + response, then each next call's new prompt suffix + response."""

    token_ids: tuple[int, ...]
    calls: tuple[PackedCall, ...]


def pack_calls(
    transitions: Sequence[Transition], context_length: int, *, merge: bool = True
) -> list[PackedSequence]:
    """The sequences that train ``transitions``: every call in exactly one, sequences in the batch's order of
    their first call. ``merge=False``: one sequence per call (the per-call rows).

    Calls are taken per (rollout, attempt, policy) in step order; each call either extends the sequence its
    predecessor there ended (exactly, within the context) or opens one. A call alone is cut to the context as a
    row always was: its response to ``context_length - 1`` tokens, its prompt from the left to what remains.
    ``ValueError`` for a call without prompt token ids (the backend did not return them)."""
    groups: dict[tuple[str, str, str | None] | int, list[int]] = {}
    for i, t in enumerate(transitions):
        if not t.prompt_token_ids:
            raise ValueError(
                f"transition {t.rollout_id}/{t.step} has no prompt token ids: the backend did not return them, "
                "so it cannot be trained on token ids (use the embedded, hf or vllm backend)"
            )
        groups.setdefault((t.rollout_id, t.attempt_id, t.policy) if merge else i, []).append(i)
    opened: list[tuple[int, list[int], list[PackedCall]]] = []  # (first call's index, ids, calls)
    for indices in groups.values():
        current: tuple[int, list[int], list[PackedCall]] | None = None
        for i in sorted(indices, key=lambda k: (transitions[k].step, k)):
            t = transitions[i]
            if current is not None and _extends(current[1], t, context_length):
                ids, calls = current[1], current[2]
                start = len(t.prompt_token_ids)
                ids.extend(t.prompt_token_ids[len(ids) :])
                ids.extend(t.response_token_ids)
                calls.append(PackedCall(i, start, len(ids)))
                continue
            response = list(t.response_token_ids)[: context_length - 1]
            prompt = list(t.prompt_token_ids)[-(context_length - len(response)) :]
            current = (i, prompt + response, [PackedCall(i, len(prompt), len(prompt) + len(response))])
            opened.append(current)
    opened.sort(key=lambda o: o[0])
    return [PackedSequence(tuple(ids), tuple(calls)) for _, ids, calls in opened]


def _extends(ids: list[int], t: Transition, context_length: int) -> bool:
    """Whether ``t``'s prompt begins with ``ids`` (the open sequence: the previous call's prompt + response),
    exactly, and the merged sequence fits the context."""
    prompt = t.prompt_token_ids
    if len(prompt) < len(ids) or len(prompt) + len(t.response_token_ids) > context_length:
        return False
    return list(prompt[: len(ids)]) == ids


def sequence_tokens(sequences: Sequence[PackedSequence]) -> int:
    """The tokens the sequences' forward passes compute."""
    return sum(len(s.token_ids) for s in sequences)


def call_tokens(transitions: Sequence[Transition], context_length: int) -> int:
    """The tokens one row per call computes (prompt + response, cut to the context as a row is)."""
    total = 0
    for t in transitions:
        response = min(len(t.response_token_ids), context_length - 1)
        total += min(len(t.prompt_token_ids), context_length - response) + response
    return total


def metrics(
    sequences: Sequence[PackedSequence],
    transitions: Sequence[Transition],
    context_length: int,
    trained: int,
    shared: int = 0,
) -> dict[str, float]:
    """An update's packing figures: ``sequences`` trained, ``tokens_trained`` (the response tokens that
    trained, ``trained``), ``tokens_shared`` (``shared``: the tokens the micro-batches' shared prompt prefixes
    computed once instead of once per row, ``tether.training.signal.prefix``), ``tokens_computed`` (the tokens
    the forward passes compute) and ``tokens_saved`` (what one row per call would have computed, less that)."""
    computed = sequence_tokens(sequences) - shared
    return {
        "sequences": float(len(sequences)),
        "tokens_trained": float(trained),
        "tokens_shared": float(shared),
        "tokens_computed": float(computed),
        "tokens_saved": float(call_tokens(transitions, context_length) - computed),
    }
