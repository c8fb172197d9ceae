"""Update batches of transitions, shared by the policy updates that train on token ids (``GRPO``, ``SFT``).

A transition becomes one row: its prompt and response token ids, right-padded, cut to the model's context from
the prompt's left. ``pack`` groups rows into micro-batches by length under a row and token budget;
``assemble`` builds a micro-batch's tensors (ids, the response mask, recorded logprobs, advantages);
``token_logprobs`` scores each next token under a model; ``context_length`` is the model's window. torch is
imported here, so this module loads only with an update that needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tether.types import Transition


def context_length(model: torch.nn.Module) -> int:
    """The model's context window (``config.max_position_embeddings``), or no limit when it does not say."""
    config = getattr(model, "config", None)
    return int(getattr(config, "max_position_embeddings", None) or 1 << 30)


def row_length(t: Transition, context_length: int) -> int:
    """The length of ``t``'s row in an update batch (prompt + response, cut to the context as ``assemble``
    cuts it)."""
    response = min(len(t.response_token_ids), context_length - 1)
    return min(len(t.prompt_token_ids), context_length - response) + response


def pack(lengths: Sequence[int], max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Micro-batches (indices into ``lengths``): rows sorted by length, each micro-batch at most ``max_rows``
    rows and, with a budget, at most ``max_tokens`` padded tokens (rows × its longest row). A row longer than
    the budget goes alone."""
    parts: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        full = len(current) >= max_rows
        over = max_tokens is not None and (len(current) + 1) * lengths[i] > max_tokens
        if current and (full or over):
            parts.append(current)
            current = []
        current.append(i)
    if current:
        parts.append(current)
    return parts


def assemble(
    part: Sequence[Transition], context_length: int, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + response`` ids, and per-position (shifted by one: the position that predicts
    each token) response mask, recorded logprobs (NaN where missing) and advantages."""
    rows = []
    for t in part:
        response = list(t.response_token_ids)[: context_length - 1]
        prompt = list(t.prompt_token_ids)[-(context_length - len(response)) :] if t.prompt_token_ids else []
        if not prompt:
            raise ValueError(
                f"transition {t.rollout_id}/{t.step} has no prompt token ids: the backend did not return them, "
                "so it cannot be trained by GRPO (use the embedded, hf or vllm backend)"
            )
        logprobs = list(t.logprobs or [])[: len(response)]
        logprobs += [math.nan] * (len(response) - len(logprobs))
        rows.append((prompt, response, logprobs, float(t.advantage or 0.0)))
    width = max(len(p) + len(r) for p, r, _, _ in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    old = torch.zeros(len(rows), width - 1)
    for i, (prompt, response, logprobs, _) in enumerate(rows):
        n_p, n_r = len(prompt), len(response)
        ids[i, : n_p + n_r] = torch.tensor(prompt + response)
        mask[i, n_p - 1 : n_p - 1 + n_r] = 1.0
        old[i, n_p - 1 : n_p - 1 + n_r] = torch.tensor(logprobs)
    adv = torch.tensor([a for _, _, _, a in rows])
    return ids, mask, old, adv


def token_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probability of each next token ``ids[:, 1:]`` under ``model`` at ``temperature``.

    With the response ``mask`` (``assemble``'s), the vocabulary projection and log-softmax run only from the
    first position any row trains on (the model's ``logits_to_keep``): positions before it get 0. Prompts are
    most of a row, and a large vocabulary's float32 logits at every position are most of a pass's memory."""
    width = ids.shape[1] - 1
    first = 0
    if mask is not None and width > 0:
        trained = torch.nonzero(mask.sum(0) > 0)
        first = int(trained[0, 0]) if len(trained) else width - 1
    kwargs = {"logits_to_keep": width + 1 - first} if first > 0 else {}
    logits = model(input_ids=ids, use_cache=False, **kwargs).logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, first + 1 :, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (first, 0)) if first > 0 else picked
