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

The token itself is chosen from the batched pass, which is safe wherever the row's uniform lands clearly inside
one token's share of the probability mass. Where it lands within ``EDGE`` of the boundary between two tokens
(a greedy row: its two best logits nearly tie; a top-p row: a token sits on the cut; 0.7 % of a trained demo
model's draws, more where the distribution is flat), those last bits could pick the other token, so a seeded
row's token there is chosen from a forward pass of the row's prompt and tokens so far alone
(``_decide_alone``), the same whatever shared the batch. Each row lays its tokens out in token-id order for
the draw (a top-p row too, over the tokens it keeps), never in an order that depends on the other rows.

A row starts from KV already known where there is some (``tether.models.local._prefix_fill``): an earlier call's of
its rollout (``reuse``, the backend's ``tether.models.local._kv_cache``), else the prefix the batch's rows share,
run once. Either moves the row's numbers in their last bits as a batch does, and is covered the same way: a draw on
an edge is decided alone, without either.

Invariant: ``tokenizer.decode(sample.token_ids, skip_special_tokens=True) == sample.text``. A row that ends
on a stop token keeps that token (with its logprob: the model learns to stop); a row that ends on a stop
string keeps the tokens before the one where the stop string begins, so the text never contains it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from tether.models.local._kv_cache import Layers
from tether.models.local._prefix_fill import (
    PrefixSource,
    cache_keyword,
    known_prefixes,
    prefill,
    reusable,
    row_layers,
)


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


def row_seed(seed: int | None, index: int) -> int | None:
    """The seed of sample ``index`` of a request seeded with ``seed`` (distinct, reproducible)."""
    return None if seed is None else (seed * 1_000_003 + index) % (2**63)


def _uniforms(params: Sequence[SampleParams], steps: int) -> torch.Tensor:
    out = torch.empty(len(params), steps)
    for i, p in enumerate(params):
        gen = torch.Generator().manual_seed(p.seed if p.seed is not None else random.getrandbits(63))
        out[i, : p.max_tokens] = torch.rand(p.max_tokens, generator=gen)
    return out


#: how close (in probability mass, as a share of the row's total; in logits for a greedy row) a draw may land to
#: the edge between two tokens before the batched pass is not trusted to decide it. The batched pass's numbers
#: move with the batch by about 1e-6 in float32 (measured: at most 6.5e-6 on the boundaries, 2e-5 on the
#: logits, on a trained demo model; 3.4e-6 and 7.3e-5 on SmolLM2-135M); half precision moves them by a whole
#: unit in the last place of a bfloat16 (about 1e-2). A draw decided alone costs a forward pass of the row: on
#: SmolLM2 at T=1, a margin of 1e-4 sent 3.8 % of draws there (2.5x the sampler's CPU time), mostly draws of
#: tokens less likely than twice the margin, whose whole share is an edge.
EDGE = {torch.float32: 3e-5, torch.float64: 3e-5}
EDGE_HALF = 3e-2
#: a greedy row's margin, in logits, is this many times ``EDGE``: logits move more than probability mass does
LOGIT_EDGE_SCALE = 30.0


def edge_for(dtype: torch.dtype) -> float:
    """The margin ``choose`` trusts the batched pass by, for a model computing in ``dtype``."""
    return EDGE.get(dtype, EDGE_HALF)


def choose(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row by inverse-CDF sampling with uniforms ``u``; returns (tokens, logprobs)."""
    tokens, logprobs, _ = pick(logits, temperature, top_p, u, 0.0)
    return tokens, logprobs


def pick(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor, edge: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``choose``, and for each row whether its choice is on an edge: the draw lands within ``edge`` of the
    boundary between two tokens (a greedy row: its two best logits are within ``edge * LOGIT_EDGE_SCALE``; a
    top-p row: a token sits within ``edge`` of the cut), where the last bits of the logits could decide it.

    Each row's tokens are laid out in token-id order for the draw; a top-p row keeps the most likely tokens
    whose mass before them is under ``top_p`` (the most likely always stays). Neither depends on the other rows
    of the batch."""
    logits = logits.float()
    rows, vocab = logits.shape
    greedy = temperature <= 0
    probs = torch.softmax(logits / temperature.clamp(min=1e-5).unsqueeze(1), dim=-1)
    near = torch.zeros(rows, dtype=torch.bool)
    nucleus = top_p < 1
    if bool(nucleus.any()):
        ordered, order = probs.sort(dim=-1, descending=True)
        before = ordered.cumsum(-1) - ordered
        # (rows with top_p=1 keep everything: rounding in the cumulative sum must not cut their tail)
        limit = torch.where(nucleus, top_p, torch.inf).unsqueeze(1)
        dropped = before >= limit
        kept = (~dropped).sum(-1)
        near |= ((before - limit).abs() < edge).any(-1)  # the cut falls on a token's edge
        if vocab > 1:  # the last kept and the first dropped token nearly tie: their order could swap
            last = ordered.gather(1, (kept - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
            first_out = ordered.gather(1, kept.clamp(max=vocab - 1).unsqueeze(1)).squeeze(1)
            near |= nucleus & (kept < vocab) & ((last - first_out).abs() < edge)
        probs = probs.masked_fill(torch.zeros_like(dropped).scatter(1, order, dropped), 0.0)
    cum = probs.cumsum(-1)
    total = cum[:, -1]
    x = (u * total).unsqueeze(1)
    chosen = torch.searchsorted(cum, x, right=True).clamp(max=vocab - 1)
    high = cum.gather(1, chosen)
    low = torch.nn.functional.pad(cum, (1, 0)).gather(1, chosen)
    near |= torch.minimum(x - low, high - x).squeeze(1) < edge * total
    picked_p = probs.gather(1, chosen).squeeze(1)
    tokens = chosen.squeeze(1)
    logprobs = torch.log(picked_p / total)
    if bool(greedy.any()):
        arg = logits.argmax(-1)
        raw = torch.log_softmax(logits, dim=-1).gather(1, arg.unsqueeze(1)).squeeze(1)
        tokens = torch.where(greedy, arg, tokens)
        logprobs = torch.where(greedy, raw, logprobs)
        if vocab > 1:
            best = logits.topk(2, dim=-1).values
            near = torch.where(greedy, (best[:, 0] - best[:, 1]) < edge * LOGIT_EDGE_SCALE, near)
    return tokens, logprobs, near


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


def _decide_alone(
    model: PreTrainedModel, prompt: Sequence[int], so_far: Sequence[int], params: SampleParams, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of a seeded row whose draw fell on an edge (``pick``), chosen from a forward pass of its
    prompt and tokens so far alone: numbers that depend on the row only, so the choice is the same whatever
    shared the batch."""
    ids = torch.tensor([[*prompt, *so_far]], dtype=torch.long, device=model.device)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1, :].cpu()
    token, logprob, _ = pick(
        logits, torch.tensor([params.temperature]), torch.tensor([params.top_p]), u.reshape(1), 0.0
    )
    return token[0], logprob[0]


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


def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    params: Sequence[SampleParams],
    *,
    stop_token_ids: Iterable[int],
    on_finish: Callable[[int, Sample], None] | None = None,
    rescore: bool = False,
    reuse: PrefixSource | None = None,
) -> list[Sample]:
    """Sample one continuation per prompt (``params[i]`` for ``prompts[i]``). Call under ``torch.inference_mode``.

    ``on_finish(i, sample)`` is called as soon as row ``i`` finishes (before slower rows are done).
    ``rescore``: recompute each seeded row's logprobs alone once it finishes (see the module docstring).
    ``reuse``: where rows find the KV of their prompt's leading tokens computed by an earlier call (a rollout's
    previous turn) and leave theirs when they finish (``tether.models.local._kv_cache``).
    """
    if len(prompts) != len(params) or not prompts:
        raise ValueError("generate needs one SampleParams per prompt and at least one prompt")
    device = model.device
    rows = len(prompts)
    if not reusable(DynamicCache(config=model.config)):
        reuse = None
        known: list[tuple[int, Layers | None]] = [(0, None)] * rows
    else:
        known = known_prefixes(model, prompts, reuse)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    cache, mask, logits = prefill(model, prompts, known, pad)
    cache_arg = {cache_keyword(model): cache}
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    uniforms = _uniforms(params, max(p.max_tokens for p in params))
    stops = torch.tensor(sorted(set(stop_token_ids)), dtype=torch.long)
    edge = edge_for(next(model.parameters()).dtype)
    max_tokens = [p.max_tokens for p in params]

    drawn: list[list[int]] = [[] for _ in range(rows)]  # every token drawn, stop strings' included
    out_ids: list[list[int]] = [[] for _ in range(rows)]
    out_lp: list[list[float]] = [[] for _ in range(rows)]
    results: list[Sample | None] = [None] * rows
    active = list(range(rows))  # original row index of each batch row
    step = 0
    while True:
        act = torch.tensor(active, dtype=torch.long)
        tokens, logprobs, near = pick(logits.cpu(), temperature[act], top_p[act], uniforms[act, step], edge)
        for b in torch.nonzero(near).flatten().tolist():  # seeded rows only: unseeded ones need not repeat
            i = active[b]
            if params[i].seed is not None:
                tokens[b], logprobs[b] = _decide_alone(model, prompts[i], out_ids[i], params[i], uniforms[i, step])
        is_stop = torch.isin(tokens, stops).tolist()
        keep: list[int] = []
        for b, (i, tok, lp) in enumerate(zip(active, tokens.tolist(), logprobs.tolist(), strict=True)):
            out_ids[i].append(tok)
            out_lp[i].append(lp)
            drawn[i].append(tok)
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
            if reuse is not None:  # the KV of its prompt and every token it fed: the next turn's prefix
                real = torch.nonzero(mask[b]).flatten()
                reuse.put([*prompts[i], *drawn[i][:-1]], row_layers(cache, b, real))
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
