"""The sampler's first forward pass over KV already known (``tether.models.local._sampling.generate``): each row's
from
an earlier call of its rollout (``PrefixSource``, the backend's ``tether.models.local._kv_cache.PrefixKV``), else
the prefix the rest of the batch shares, run once here.

``prefill`` runs the rows with known KV and those without as separate passes (each pass computes every row as
wide as its widest unknown part), each laid out ``[pad | known | pad | rest of the prompt]`` per row with the
padding masked out and positions counted over real tokens, then lays the rows' real positions into one cache,
right-aligned, no wider than the longest prompt. A finished row's KV is copied out of the batch cache by
``row_layers`` for the next call.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from tether.models.local._kv_cache import Layers

_cache_keywords: dict[type, str] = {}


def cache_keyword(model: torch.nn.Module) -> str:
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


#: the fewest tokens all of a batch's prompts must share before their prefix is computed once for the batch
MIN_SHARED_PREFIX = 16


def reusable(cache: DynamicCache) -> bool:
    """Whether a layer's KV can be copied between rows and batches: plain layers only (a sliding-window layer
    keeps only its window)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def _kv(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A plain cache layer's keys and values (``reusable`` checked the kind)."""
    assert isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None
    return layer.keys, layer.values


def _layers(cache: DynamicCache) -> Layers:
    return [_kv(layer) for layer in cache.layers]


def _shared_prefix(model: PreTrainedModel, prompts: Sequence[Sequence[int]]) -> tuple[int, Layers | None]:
    """The prompts' common prefix (the system turn and tool list an agent sends every time) run through the model
    once: its length and KV (0, None: not worth it). It stops one token short of the shortest prompt, so every
    row still has a token whose logits start its reply."""
    if len(prompts) < 2:
        return 0, None
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    shared = 0
    while shared < limit and all(p[shared] == first[shared] for p in prompts):
        shared += 1
    if shared < MIN_SHARED_PREFIX:
        return 0, None
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([list(first[:shared])], dtype=torch.long, device=model.device)
    model(input_ids=ids, **{cache_keyword(model): cache}, use_cache=True, logits_to_keep=1)
    return shared, _layers(cache)


def known_prefixes(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], reuse: PrefixSource | None
) -> list[tuple[int, Layers | None]]:
    """Each row's leading tokens whose KV is known before the batch runs, and that KV: from ``reuse`` (an earlier
    call of the same rollout), else the prefix the rows without one share, computed once here."""
    known: list[tuple[int, Layers | None]] = [reuse.lookup(p) if reuse is not None else (0, None) for p in prompts]
    rest = [i for i, (n, _) in enumerate(known) if n == 0]
    shared, layers = _shared_prefix(model, [prompts[i] for i in rest])
    for i in rest:
        known[i] = (shared, layers)
    return known


def _fill(
    cache: DynamicCache, known: Sequence[tuple[int, Layers | None]], width: int, device: torch.device
) -> None:
    """Lay each row's known KV into ``cache``, right-aligned in the first ``width`` positions (the rest of that
    region is padding, masked out)."""
    source = next(layers for _, layers in known if layers is not None)
    for index, (keys, values) in enumerate(source):
        batch_keys = keys.new_zeros((len(known), keys.shape[1], width, keys.shape[3]), device=device)
        batch_values = values.new_zeros((len(known), values.shape[1], width, values.shape[3]), device=device)
        for row, (n, layers) in enumerate(known):
            if n and layers is not None:
                batch_keys[row, :, width - n :] = layers[index][0][0, :, :n]
                batch_values[row, :, width - n :] = layers[index][1][0, :, :n]
        cache.update(batch_keys, batch_values, index)


def _pass(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], known: Sequence[tuple[int, Layers | None]], pad: int
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """One forward pass of the prompts' unknown tokens over their known KV: the cache (``[pad | known | pad |
    rest]`` per row), its attention mask and each row's last logits."""
    device = model.device
    cache = DynamicCache(config=model.config)
    shared = max(n for n, _ in known)  # the width of the known region, each row's right-aligned in it
    if shared:
        _fill(cache, known, shared, device)
    width = max(len(p) - n for p, (n, _) in zip(prompts, known, strict=True))
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), shared + width), dtype=torch.long)
    for i, (p, (n, _)) in enumerate(zip(prompts, known, strict=True)):
        mask[i, shared - n : shared] = 1
        input_ids[i, width - (len(p) - n) :] = torch.tensor(list(p[n:]), dtype=torch.long)
        mask[i, shared + width - (len(p) - n) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    mask = mask.to(device)
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=mask,
        position_ids=positions.to(device),
        **{cache_keyword(model): cache},
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1, :]
    return cache, mask, logits


def prefill(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], known: Sequence[tuple[int, Layers | None]], pad: int
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """Run the prompts over their known KV: the batch's cache, attention mask and each row's last logits.

    Rows with known KV and rows without run as two passes (one pass would compute every row as wide as the
    widest unknown part: a row whose earlier turn is known would pay for a new row's whole prompt), then their
    caches are laid out as one, each row's real positions right-aligned (``[pad | prompt]``), no wider than the
    longest prompt: the decoding steps attend over no more than without known KV."""
    groups = [[i for i, (n, _) in enumerate(known) if bool(n) == has] for has in (True, False)]
    if not groups[0] or not groups[1]:
        cache, mask, logits = _pass(model, prompts, known, pad)
        if not groups[0]:  # nothing known: already [pad | prompt]
            return cache, mask, logits
        passes = [(list(range(len(prompts))), cache, mask, logits)]
    else:
        passes = []
        for rows in groups:
            part = _pass(model, [prompts[i] for i in rows], [known[i] for i in rows], pad)
            passes.append((rows, *part))
    return _compact(model, prompts, passes)


def _compact(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    passes: Sequence[tuple[list[int], DynamicCache, torch.Tensor, torch.Tensor]],
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """One cache of the passes' rows (in prompt order), each row's real positions right-aligned."""
    device = model.device
    longest = max(len(p) for p in prompts)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long, device=device)
    first_logits = passes[0][3]
    logits = first_logits.new_empty((len(prompts), first_logits.shape[-1]))
    reals: list[tuple[int, int, torch.Tensor, int]] = []  # (pass, row in it, its real positions, row)
    for k, (rows, _, part_mask, part_logits) in enumerate(passes):
        for j, i in enumerate(rows):
            reals.append((k, j, torch.nonzero(part_mask[j]).flatten(), i))
            mask[i, longest - len(prompts[i]) :] = 1
            logits[i] = part_logits[j]
    cache = DynamicCache(config=model.config)
    layered = [_layers(part[1]) for part in passes]
    for index, (keys, values) in enumerate(layered[0]):
        shape = (len(prompts), keys.shape[1], longest, keys.shape[3])
        all_keys, all_values = keys.new_zeros(shape), values.new_zeros(shape)
        for k, j, real, i in reals:
            part_keys, part_values = layered[k][index]
            all_keys[i, :, longest - len(real) :] = part_keys[j].index_select(1, real)
            all_values[i, :, longest - len(real) :] = part_values[j].index_select(1, real)
        cache.update(all_keys, all_values, index)
    return cache, mask, logits


def row_layers(cache: DynamicCache, row: int, positions: torch.Tensor) -> Layers:
    """Row ``row``'s KV at ``positions`` of the batch cache, copied out (``[1, heads, len, head_dim]`` each)."""
    out = []
    for keys, values in _layers(cache):
        out.append(
            (keys[row : row + 1].index_select(2, positions), values[row : row + 1].index_select(2, positions))
        )
    return out


class PrefixSource(Protocol):
    """Where the sampler finds and leaves KV across calls (``tether.models.local._kv_cache.ScopedKV``)."""

    def lookup(self, prompt: Sequence[int]) -> tuple[int, Layers | None]: ...

    def put(self, ids: Sequence[int], layers: Layers) -> None: ...
