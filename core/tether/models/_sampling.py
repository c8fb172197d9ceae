"""Batched sampling from a transformers causal LM with a KV cache, recording token ids and logprobs.

One call samples many rows (prompts × n) with per-row temperature, top_p, max_tokens, stop strings and
seed. Rows that finish are dropped from the batch (and their KV cache), so short answers don't pay for long
ones. Each sampled token's logprob is taken under the distribution it was drawn from (temperature-scaled and
top-p-truncated); greedy rows (temperature 0) report the logprob under the unscaled distribution.

A seeded row draws its uniforms from its own seed, so what it samples does not depend on what else shares its
batch (but see ``docs/reproducibility.md``: the batched pass's numbers move in their last bits with the batch's
padding). Its recorded logprobs come from the batched pass too, and move the same way; with
``rescore=True`` each finished seeded row's logprobs are recomputed by one forward pass of its prompt and tokens
alone (``_rescore``), numbers that depend on the row only, at the cost of that pass. GRPO does not need it: it
takes the logprobs of the data it trains from its own first pass.

Invariant: ``tokenizer.decode(sample.token_ids, skip_special_tokens=True) == sample.text``. A row that ends
on a stop token keeps that token (with its logprob: the model learns to stop); a row that ends on a stop
string keeps the tokens before the one where the stop string begins, so the text never contains it.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase


@dataclass(slots=True)
class SampleParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(slots=True)
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" or "length"


_cache_keywords: dict[type, str] = {}


def _cache_keyword(model: torch.nn.Module) -> str:
    """The name ``forward`` takes the KV cache under: ``cache`` from transformers 5.24 (which warns on every call
    given ``past_key_values``), ``past_key_values`` before. Looked up once per model class."""
    get_base = getattr(model, "get_base_model", None)  # a PEFT model passes the keyword on to its base
    if callable(get_base):
        model = get_base()
    kind = type(model)
    if kind not in _cache_keywords:
        params = inspect.signature(model.forward).parameters
        _cache_keywords[kind] = "cache" if "cache" in params else "past_key_values"
    return _cache_keywords[kind]


def row_seed(seed: int | None, index: int) -> int | None:
    """The seed of sample ``index`` of a request seeded with ``seed`` (distinct, reproducible)."""
    return None if seed is None else (seed * 1_000_003 + index) % (2**63)


def _uniforms(params: Sequence[SampleParams], steps: int) -> torch.Tensor:
    out = torch.empty(len(params), steps)
    for i, p in enumerate(params):
        gen = torch.Generator().manual_seed(p.seed if p.seed is not None else random.getrandbits(63))
        out[i, : p.max_tokens] = torch.rand(p.max_tokens, generator=gen)
    return out


def choose(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row by inverse-CDF sampling with uniforms ``u``; returns (tokens, logprobs)."""
    logits = logits.float()
    greedy = temperature <= 0
    probs = torch.softmax(logits / temperature.clamp(min=1e-5).unsqueeze(1), dim=-1)
    order: torch.Tensor | None = None
    if bool((top_p < 1).any()):
        probs, order = probs.sort(dim=-1, descending=True)
        # drop a token when the mass before it already reaches top_p (the most likely token always stays)
        # (rows with top_p=1 keep everything: rounding in the cumulative sum must not cut their tail)
        limit = torch.where(top_p >= 1, torch.inf, top_p).unsqueeze(1)
        probs = probs.masked_fill((probs.cumsum(-1) - probs) >= limit, 0.0)
    cum = probs.cumsum(-1)
    total = cum[:, -1]
    pick = torch.searchsorted(cum, (u * total).unsqueeze(1), right=True).clamp(max=probs.shape[1] - 1)
    picked_p = probs.gather(1, pick).squeeze(1)
    tokens = pick.squeeze(1) if order is None else order.gather(1, pick).squeeze(1)
    logprobs = torch.log(picked_p / total)
    if bool(greedy.any()):
        arg = logits.argmax(-1)
        raw = torch.log_softmax(logits, dim=-1).gather(1, arg.unsqueeze(1)).squeeze(1)
        tokens = torch.where(greedy, arg, tokens)
        logprobs = torch.where(greedy, raw, logprobs)
    return tokens, logprobs


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The logprob of ``tokens[k]`` under row ``k`` of ``logits`` in the distribution ``choose`` draws from
    (temperature-scaled, top-p-truncated; unscaled for greedy rows)."""
    logits = logits.float()
    picked = tokens.unsqueeze(1)
    if temperature <= 0:
        return torch.log_softmax(logits, dim=-1).gather(1, picked).squeeze(1)
    probs = torch.softmax(logits / max(temperature, 1e-5), dim=-1)
    if top_p < 1:
        ordered, order = probs.sort(dim=-1, descending=True)
        drop = (ordered.cumsum(-1) - ordered) >= top_p
        probs = probs.scatter(1, order, ordered.masked_fill(drop, 0.0))
    return torch.log(probs.gather(1, picked).squeeze(1) / probs.sum(-1))


def _rescore(model: PreTrainedModel, prompt: Sequence[int], sample: Sample, params: SampleParams) -> None:
    """Recompute ``sample``'s logprobs from a forward pass of its prompt and tokens alone (no batch, no
    padding): numbers that depend on the row only."""
    if not sample.token_ids:
        return
    ids = torch.tensor([[*prompt, *sample.token_ids]], dtype=torch.long, device=model.device)
    n = len(sample.token_ids)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=n + 1).logits[0, :-1]
    tokens = torch.tensor(sample.token_ids, dtype=torch.long)
    sample.logprobs = token_logprobs(logits.cpu(), tokens, params.temperature, params.top_p).tolist()


def _cut_at_stop(
    tokenizer: PreTrainedTokenizerBase, ids: list[int], stop: tuple[str, ...], start: int
) -> int | None:
    """If the decoded ``ids`` contain a stop string (at or after char ``start``), the number of ids to keep."""
    text = str(tokenizer.decode(ids, skip_special_tokens=True))
    hits = [i for i in (text.find(s, start) for s in stop) if i >= 0]
    if not hits:
        return None
    pos = min(hits)
    keep = len(ids) - 1
    while keep > 0 and len(tokenizer.decode(ids[:keep], skip_special_tokens=True)) > pos:
        keep -= 1
    return keep


#: the fewest tokens all of a batch's prompts must share before their prefix is computed once for the batch
MIN_SHARED_PREFIX = 16


def _prefill_shared_prefix(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], cache_arg: dict[str, DynamicCache]
) -> int:
    """Run the prompts' common prefix (the system turn and tool list an agent sends every time) through the
    model once and copy its KV cache to every row; returns its length (0: not worth it, nothing done). It stops
    one token short of the shortest prompt, so every row still has a token whose logits start its reply."""
    if len(prompts) < 2:
        return 0
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    shared = 0
    while shared < limit and all(p[shared] == first[shared] for p in prompts):
        shared += 1
    if shared < MIN_SHARED_PREFIX:
        return 0
    ids = torch.tensor([list(first[:shared])], dtype=torch.long, device=model.device)
    model(input_ids=ids, **cache_arg, use_cache=True, logits_to_keep=1)
    next(iter(cache_arg.values())).batch_repeat_interleave(len(prompts))
    return shared


def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    params: Sequence[SampleParams],
    *,
    stop_token_ids: Iterable[int],
    on_finish: Callable[[int, Sample], None] | None = None,
    rescore: bool = False,
) -> list[Sample]:
    """Sample one continuation per prompt (``params[i]`` for ``prompts[i]``). Call under ``torch.inference_mode``.

    ``on_finish(i, sample)`` is called as soon as row ``i`` finishes (before slower rows are done).
    ``rescore``: recompute each seeded row's logprobs alone once it finishes (see the module docstring).
    """
    if len(prompts) != len(params) or not prompts:
        raise ValueError("generate needs one SampleParams per prompt and at least one prompt")
    device = model.device
    rows = len(prompts)
    cache = DynamicCache(config=model.config)
    cache_arg = {_cache_keyword(model): cache}
    shared = _prefill_shared_prefix(model, prompts, cache_arg)
    width = max(len(p) for p in prompts) - shared
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((rows, width), pad, dtype=torch.long)
    mask = torch.zeros((rows, shared + width), dtype=torch.long)
    mask[:, :shared] = 1
    for i, p in enumerate(prompts):
        input_ids[i, width - (len(p) - shared) :] = torch.tensor(list(p[shared:]), dtype=torch.long)
        mask[i, shared + width - (len(p) - shared) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    uniforms = _uniforms(params, max(p.max_tokens for p in params))
    stops = torch.tensor(sorted(set(stop_token_ids)), dtype=torch.long)
    max_tokens = [p.max_tokens for p in params]

    out_ids: list[list[int]] = [[] for _ in range(rows)]
    out_lp: list[list[float]] = [[] for _ in range(rows)]
    results: list[Sample | None] = [None] * rows
    active = list(range(rows))  # original row index of each batch row
    mask, input_ids, positions = mask.to(device), input_ids.to(device), positions.to(device)
    logits = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        **cache_arg,
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1, :]
    step = 0
    while True:
        act = torch.tensor(active, dtype=torch.long)
        tokens, logprobs = choose(logits.cpu(), temperature[act], top_p[act], uniforms[act, step])
        is_stop = torch.isin(tokens, stops).tolist()
        keep: list[int] = []
        for b, (i, tok, lp) in enumerate(zip(active, tokens.tolist(), logprobs.tolist(), strict=True)):
            out_ids[i].append(tok)
            out_lp[i].append(lp)
            finish = "stop" if is_stop[b] else ("length" if len(out_ids[i]) >= max_tokens[i] else None)
            if finish is None and params[i].stop:
                cut = _cut_at_stop(tokenizer, out_ids[i], params[i].stop, 0)
                if cut is not None:
                    del out_ids[i][cut:], out_lp[i][cut:]
                    finish = "stop"
            if finish is None:
                keep.append(b)
                continue
            sample = Sample(
                out_ids[i], out_lp[i], str(tokenizer.decode(out_ids[i], skip_special_tokens=True)), finish
            )
            if rescore and params[i].seed is not None:
                _rescore(model, prompts[i], sample, params[i])
            results[i] = sample
            if on_finish is not None:
                on_finish(i, sample)
        if not keep:
            break
        step += 1
        if len(keep) < len(active):
            sel = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(sel.to(device))
            mask = mask[sel.to(device)]
            tokens = tokens[sel]
            active = [active[b] for b in keep]
        act = torch.tensor(active, dtype=torch.long)
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
        logits = model(
            input_ids=tokens.unsqueeze(1).to(device),
            attention_mask=mask,
            position_ids=(next_pos[act] + step - 1).unsqueeze(1).to(device),
            **cache_arg,
            use_cache=True,
        ).logits[:, -1, :]
    return [r for r in results if r is not None]
