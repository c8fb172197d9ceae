"""Update batches of transitions, shared by the policy updates that train on token ids (``GRPO``, ``SFT``).

A row is a packed sequence (``tether.training.signal.packing``: the calls of a rollout that extend each other
exactly, or one call), right-padded. ``pack`` groups rows into micro-batches by length under a row and token
budget; ``assemble`` builds a micro-batch's tensors (ids, and per position the response mask, recorded
logprobs, advantages and the call that owns the position);
``token_logprobs`` scores each next token under a model; ``context_length`` is the model's window. torch is
imported here, so this module loads only with an update that needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tether.training.signal import prefix
from tether.training.signal.packing import PackedSequence
from tether.training.signal.prefix import MIN_SHARED
from tether.types import Transition


def context_length(model: torch.nn.Module) -> int:
    """The model's context window (``config.max_position_embeddings``), or no limit when it does not say."""
    config = getattr(model, "config", None)
    return int(getattr(config, "max_position_embeddings", None) or 1 << 30)


def pack(
    lengths: Sequence[int], max_rows: int, max_tokens: int | None, *, order: Sequence[int] | None = None
) -> list[list[int]]:
    """Micro-batches (indices into ``lengths``): rows (packed sequences) taken in ``order`` (default: sorted by
    length), each micro-batch at most ``max_rows`` rows and, with a budget, at most ``max_tokens`` padded tokens
    (rows × its longest row). A row longer than the budget goes alone."""
    parts: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order if order is not None else sorted(range(len(lengths)), key=lengths.__getitem__):
        full = len(current) >= max_rows
        over = max_tokens is not None and (len(current) + 1) * max(longest, lengths[i]) > max_tokens
        if current and (full or over):
            parts.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    if current:
        parts.append(current)
    return parts


def micro_batches(
    sequences: Sequence[PackedSequence], max_rows: int, max_tokens: int | None, share_prefix: bool
) -> list[list[int]]:
    """An update's micro-batches: ``pack`` by length, or with ``share_prefix``, where it costs the forward passes
    fewer tokens, rows that begin alike together, so each micro-batch's common prompt prefix is computed once
    (``tether.training.signal.prefix``; rows that share nothing keep the length order, which pads least)."""
    by_length = pack([len(s.token_ids) for s in sequences], max_rows, max_tokens)
    if not share_prefix:
        return by_length
    alike = prefix.micro_batches(sequences, max_rows, max_tokens)
    return min((by_length, alike), key=lambda parts: prefix.cost(sequences, parts))


def assemble(
    sequences: Sequence[PackedSequence], batch: Sequence[Transition], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A micro-batch's tensors from its packed sequences (``tether.training.signal.packing.pack_calls`` of
    ``batch``,
    whose calls index ``batch``): ``ids [B, W]`` right-padded, and per position, shifted by one (position p
    predicts token p+1): ``mask [B, W-1]`` 1 where a trained response token is predicted, ``old [B, W-1]`` the
    recorded logprob of that token (NaN where none was recorded), ``adv [B, W-1]`` its call's advantage,
    ``owner [B, W-1]`` its call's index in ``batch`` (-1 where no response token is predicted)."""
    width = max(len(s.token_ids) for s in sequences)
    rows = len(sequences)
    ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(rows, width - 1)
    old = torch.zeros(rows, width - 1)
    adv = torch.zeros(rows, width - 1)
    owner = torch.full((rows, width - 1), -1, dtype=torch.long)
    for r, sequence in enumerate(sequences):
        ids[r, : len(sequence.token_ids)] = torch.tensor(sequence.token_ids)
        for call in sequence.calls:
            t = batch[call.index]
            n = call.end - call.start
            if not n:
                continue
            logprobs = list(t.logprobs or [])[:n]
            logprobs += [math.nan] * (n - len(logprobs))
            span = slice(call.start - 1, call.end - 1)
            mask[r, span] = 1.0
            old[r, span] = torch.tensor(logprobs)
            adv[r, span] = float(t.advantage or 0.0)
            owner[r, span] = call.index
    return ids, mask, old, adv, owner


def token_logprobs(
    model: torch.nn.Module,
    ids: torch.Tensor,
    temperature: float,
    mask: torch.Tensor | None = None,
    *,
    share_prefix: bool = True,
) -> torch.Tensor:
    """Log-probability of each next token ``ids[:, 1:]`` under ``model`` at ``temperature``.

    With the response ``mask`` (``assemble``'s), the vocabulary projection and log-softmax run only from the
    first position any row trains on (the model's ``logits_to_keep``): positions before it get 0. Prompts are
    most of a row, and a large vocabulary's float32 logits at every position are most of a pass's memory.

    With the mask and ``share_prefix``, the token ids every row begins with, up to that first position, are
    computed once and their key/value cache repeated across the rows (``tether.training.signal.prefix``): the
    same logprobs and gradients (to float rounding) for less compute. Not with activation checkpointing, whose
    recomputation in the backward pass would extend the cache a second time."""
    width = ids.shape[1] - 1
    first = 0
    if mask is not None and width > 0:
        trained = torch.nonzero(mask.sum(0) > 0)
        first = int(trained[0, 0]) if len(trained) else width - 1
    kwargs = {"logits_to_keep": width + 1 - first} if first > 0 else {}
    shared = _shared_prefix(ids, first) if shares_prefix(model, share_prefix) else 0
    if shared:
        from transformers import DynamicCache

        from tether.models.local._prefix_fill import cache_keyword

        cache = DynamicCache(config=getattr(model, "config", None))
        keyword = cache_keyword(model)
        model(input_ids=ids[:1, :shared], **{keyword: cache}, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(ids.shape[0])  # (autograd sums the rows' gradients into the one prefix)
        out = model(input_ids=ids[:, shared:], **{keyword: cache}, use_cache=True, **kwargs)
    else:
        out = model(input_ids=ids, use_cache=False, **kwargs)
    logits = out.logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, first + 1 :, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (first, 0)) if first > 0 else picked


def _shared_prefix(ids: torch.Tensor, first: int) -> int:
    """``tether.training.signal.prefix.shared_prefix``'s rule on a micro-batch's tensor: the token ids every
    row begins with, at most ``first`` (the first trained position) long; 0 under ``MIN_SHARED`` or one row."""
    if ids.shape[0] < 2 or first < MIN_SHARED:
        return 0
    differs = torch.nonzero(~(ids[:, :first] == ids[:1, :first]).all(0))
    n = int(differs[0, 0]) if len(differs) else first
    return n if n >= MIN_SHARED else 0


def shares_prefix(model: torch.nn.Module, share_prefix: bool) -> bool:
    """Whether ``token_logprobs(model, ..., share_prefix=share_prefix)`` computes a micro-batch's common prompt
    prefix once: asked for, and activation checkpointing off on ``model``, whoever turned it on. What an update
    lays its micro-batches out for and counts in ``tokens_shared``."""
    return share_prefix and not _checkpointing(model)


def _checkpointing(model: torch.nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on (transformers 5's name, then the older one)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(model, name):
            return bool(getattr(model, name))
    return False
