"""Laying KV already known into a batch's cache before the sampler's first forward pass
(``tether.models._sampling.generate``): each row's from an earlier call of its rollout (``PrefixSource``, the
backend's ``tether.models._kv_cache.PrefixKV``), else the prefix the rest of the batch shares, run once here.

Each row's known KV is right-aligned in the batch cache's first positions and the rest of its prompt follows,
left-padded, so a batch cache reads ``[pad | known | pad | rest of the prompt]`` per row, the padding masked out
and positions counted over the real tokens only. A finished row's KV is copied out of the batch cache by
``row_layers`` for the next call.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from tether.models._kv_cache import Layers

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


def fill(
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


def row_layers(cache: DynamicCache, row: int, positions: torch.Tensor) -> Layers:
    """Row ``row``'s KV at ``positions`` of the batch cache, copied out (``[1, heads, len, head_dim]`` each)."""
    out = []
    for keys, values in _layers(cache):
        out.append(
            (keys[row : row + 1].index_select(2, positions), values[row : row + 1].index_select(2, positions))
        )
    return out


class PrefixSource(Protocol):
    """Where the sampler finds and leaves KV across calls (``tether.models._kv_cache.ScopedKV``)."""

    def lookup(self, prompt: Sequence[int]) -> tuple[int, Layers | None]: ...

    def put(self, ids: Sequence[int], layers: Layers) -> None: ...
