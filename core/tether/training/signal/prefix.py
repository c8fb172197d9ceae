"""The prompt prefix the rows of one micro-batch share, computed once in an update's forward pass.

The rows of an update batch mostly begin alike: every call of an agent starts with the same system prompt and
tool schemas, and the ``group_size`` rollouts of one task start with the same task. Trained as they are, each
row computes that prefix again. When every row of a micro-batch begins with the same ``n`` token ids, the
forward pass computes them once (one row), repeats the result's key/value cache across the rows and computes
each row's remaining tokens on top of it (``tether.algorithms.batching.token_logprobs``). In a causal model a
position sees exactly the same tokens either way, and autograd sums the repeated prefix's gradient over the
rows, so the loss and its gradient are the full rows' (to float rounding). Exact or not at all: the prefix is
the rows' common token ids, compared as ids.

The shared prefix stops before the first position whose output trains (the position predicting a row's first
response token), so every trained position is computed in the rows' own pass, and is used only when it is at
least ``MIN_SHARED`` tokens long and the micro-batch has two rows or more.

Pure Python (no torch): ``shared_prefix`` is the rule ``token_logprobs`` applies to its tensors, on packed
sequences, for an update's ``tokens_shared`` metric.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.training.signal.packing import PackedSequence

#: the shortest common prefix worth a forward pass of its own (the sampler's rule too:
#: ``tether.models.local._prefix_fill.MIN_SHARED_PREFIX``)
MIN_SHARED = 16
#: what one more forward pass costs beyond its tokens (Python and per-call work), in tokens: the price of cutting a
#: micro-batch in two (a small model's pass is mostly this; a large one's mostly its tokens)
PASS_COST = 32


def shared_prefix(rows: Sequence[PackedSequence]) -> int:
    """The tokens the micro-batch ``rows`` share and compute once: their common token ids, up to the position
    that predicts the first trained response token of any row; 0 when that is under ``MIN_SHARED`` or there is
    one row."""
    if len(rows) < 2:
        return 0
    limit = min(first_trained(row) for row in rows)
    head = rows[0].token_ids
    n = 0
    while n < limit and all(row.token_ids[n] == head[n] for row in rows):
        n += 1
    return n if n >= MIN_SHARED else 0


def first_trained(row: PackedSequence) -> int:
    """The position predicting ``row``'s first response token (what a shared prefix may not reach)."""
    starts = [call.start for call in row.calls if call.end > call.start]
    return min(starts, default=len(row.token_ids)) - 1


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many token ids ``a`` and ``b`` begin with alike."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def micro_batches(rows: Sequence[PackedSequence], max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Micro-batches (indices into ``rows``) whose rows begin alike: rows in the order of their token ids (one
    task's group, one sub-agent's system prompt, side by side), a micro-batch closed when it holds ``max_rows``
    rows, when it would exceed ``max_tokens`` padded tokens (rows × its longest row), or when the next row
    would cost the forward pass more inside it (its shared prefix cut short: every row computes more; a longer
    row pads the others) than in a pass of its own. A micro-batch's cost is its shared prefix once plus each
    row's padded rest (``cost``)."""
    order = sorted(range(len(rows)), key=lambda i: rows[i].token_ids)
    parts: list[list[int]] = []
    current: list[int] = []
    limit = longest = now = 0  # the open micro-batch's trained-position bound, longest row and cost
    for i in order:
        row = rows[i]
        start, length = first_trained(row), len(row.token_ids)
        if current:
            grown_limit, grown_longest = min(limit, start), max(longest, length)
            # in token-id order the open micro-batch's first row and this one bound what they all share
            shared = min(common_length(rows[current[0]].token_ids, row.token_ids), grown_limit)
            grown = _cost(len(current) + 1, grown_longest, shared)
            full = len(current) >= max_rows
            over = max_tokens is not None and (len(current) + 1) * grown_longest > max_tokens
            if not (full or over or grown > now + length + PASS_COST):
                current.append(i)
                limit, longest, now = grown_limit, grown_longest, grown
                continue
            parts.append(current)
        current, limit, longest, now = [i], start, length, length
    if current:
        parts.append(current)
    return parts


def cost(rows: Sequence[PackedSequence], parts: Sequence[Sequence[int]]) -> int:
    """What the micro-batches ``parts`` of ``rows`` cost the forward passes, in tokens: each one's shared prefix
    once, each row's padded rest, and ``PASS_COST`` a pass (two for a micro-batch with a shared prefix)."""
    total = 0
    for part in parts:
        chosen = [rows[i] for i in part]
        shared = shared_prefix(chosen)
        total += _cost(len(chosen), max(len(r.token_ids) for r in chosen), shared) + PASS_COST * (1 + bool(shared))
    return total


def _cost(n_rows: int, longest: int, shared: int) -> int:
    """Tokens a micro-batch's forward pass computes: the shared prefix once, each row's padded rest."""
    shared = shared if shared >= MIN_SHARED and n_rows > 1 else 0
    return shared + n_rows * (longest - shared)


def shared_tokens(parts: Sequence[Sequence[PackedSequence]]) -> int:
    """The tokens the shared prefixes of ``parts`` (the update's micro-batches) spare the forward passes: a
    micro-batch of ``r`` rows sharing ``n`` tokens computes them once instead of ``r`` times."""
    return sum((len(part) - 1) * shared_prefix(part) for part in parts)
