"""A rollout's KV cache across its turns: the keys and values a finished sample computed, kept for the next call
whose prompt begins with the same token ids, so the local sampler (``tether.models.local._sampling``) does not
compute that prefix again.

An agent's second call sends the first call's prompt, the reply it sampled and a tool result: its prompt's token
ids begin with the first call's prompt + response ids. When a row finishes, the sampler hands its KV (prompt and
every token it fed, one short of its last) to ``PrefixKV.put``; a later row's ``lookup`` finds the entry sharing
the longest run of leading token ids with its prompt (a prefix lookup on the ids themselves, never on text) and
starts from that many positions of it, at least ``MIN_REUSE`` and always one short of the prompt (the last
prompt token's logits start the reply). A KV cache holds only what a causal model computed from the tokens before
each position, so any leading part of an entry is the KV of that part.

Entries belong to one policy's weights version (``scope``): the weights change at every update, and an entry of
an older version is dropped when its policy's newer one is stored or looked up. Memory is bounded by a byte
budget (``DEFAULT_BUDGET_BYTES``; ``kv_cache=`` on the backend), the least recently used entries evicted first;
an entry another extends (the same rollout's next turn) replaces it.

``stats`` counts rows looked up (``calls``), rows that started from an entry (``hits``), prompt tokens taken from
entries (``reused_tokens``) and all prompt tokens looked up (``prompt_tokens``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

#: the default byte budget of a backend's KV cache: on SmolLM2-135M in float32 (46 KB a token) about 11,600
#: tokens, the live turn of 16 concurrent rollouts (``n_runners``) of 700 tokens each; the embedded tiny model's
#: 4 KB a token fits 130,000
DEFAULT_BUDGET_BYTES = 512 * 2**20
#: the fewest leading tokens a row takes from an entry (fewer are not worth the copy)
MIN_REUSE = 16

#: one layer's keys and values, each ``[1, heads, tokens, head_dim]``
Layers = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(slots=True)
class _Entry:
    scope: Hashable
    ids: np.ndarray
    layers: Layers
    nbytes: int


@dataclass(slots=True)
class KVStats:
    """What the cache saved (see the module docstring)."""

    calls: int = 0
    hits: int = 0
    reused_tokens: int = 0
    prompt_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass
class PrefixKV:
    """The entries, least recently used first, within ``budget`` bytes (0: nothing is kept)."""

    budget: int = DEFAULT_BUDGET_BYTES
    stats: KVStats = field(default_factory=KVStats)
    _entries: OrderedDict[int, _Entry] = field(default_factory=OrderedDict)
    _next: int = 0
    _bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def scoped(self, scope: Hashable) -> ScopedKV:
        """The view the sampler uses for one batch sampled on ``scope``'s weights (policy, version)."""
        return ScopedKV(self, scope)

    def lookup(self, scope: Hashable, prompt: Sequence[int]) -> tuple[int, Layers | None]:
        """How many leading tokens of ``prompt`` an entry of ``scope`` holds (0: none worth taking), and its
        layers (their first that many positions are the prompt's)."""
        ids = np.asarray(prompt, dtype=np.int64)
        limit = len(ids) - 1
        best, found = 0, None
        with self._lock:
            self.stats.calls += 1
            self.stats.prompt_tokens += len(ids)
            self._drop_stale(scope)
            for key, entry in self._entries.items():
                if entry.scope != scope:
                    continue
                n = min(limit, len(entry.ids))
                differ = np.flatnonzero(ids[:n] != entry.ids[:n])
                shared = int(differ[0]) if len(differ) else n
                if shared > best:
                    best, found = shared, key
            if found is None or best < MIN_REUSE:
                return 0, None
            self._entries.move_to_end(found)
            self.stats.hits += 1
            self.stats.reused_tokens += best
            return best, self._entries[found].layers

    def put(self, scope: Hashable, ids: Sequence[int], layers: Layers) -> None:
        """Keep the KV of ``ids`` (``layers``: ``[1, heads, len(ids), head_dim]`` each) for later lookups."""
        size = sum(k.nbytes + v.nbytes for k, v in layers)
        if len(ids) < MIN_REUSE or size > self.budget:
            return
        array = np.asarray(ids, dtype=np.int64)
        with self._lock:
            self._drop_stale(scope)
            for key, entry in list(self._entries.items()):  # an entry this one extends: the same rollout's turn
                if entry.scope == scope and len(entry.ids) <= len(array):
                    if np.array_equal(entry.ids, array[: len(entry.ids)]):
                        self._remove(key)
            while self._entries and self._bytes + size > self.budget:
                self._remove(next(iter(self._entries)))
            self._entries[self._next] = _Entry(scope, array, layers, size)
            self._next += 1
            self._bytes += size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _drop_stale(self, scope: Hashable) -> None:
        """Drop the entries of the same policy (``scope[0]``) on other weights versions."""
        if not isinstance(scope, tuple) or not scope:
            return
        for key, entry in list(self._entries.items()):
            other = entry.scope
            if isinstance(other, tuple) and other and other[0] == scope[0] and other != scope:
                self._remove(key)

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key)
        self._bytes -= entry.nbytes


@dataclass(slots=True)
class ScopedKV:
    """A ``PrefixKV`` seen from one batch's weights (``PrefixKV.scoped``)."""

    cache: PrefixKV
    scope: Hashable

    def lookup(self, prompt: Sequence[int]) -> tuple[int, Layers | None]:
        return self.cache.lookup(self.scope, prompt)

    def put(self, ids: Sequence[int], layers: Layers) -> None:
        self.cache.put(self.scope, ids, layers)


def parse_budget(value: str | int | None) -> int:
    """A byte budget from ``kv_cache=``: an int of bytes, or ``"256MB"``, ``"1GB"``, ``"0"`` (off); None: the
    default. ``ValueError`` naming the form otherwise."""
    if value is None:
        return DEFAULT_BUDGET_BYTES
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().upper().removesuffix("B")
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    if not number.isdigit():
        raise ValueError(
            f"kv_cache={value!r}: give the KV cache's byte budget as bytes or with a unit, e.g. kv_cache=256MB, "
            "kv_cache=1GB, or kv_cache=0 to turn it off"
        )
    return int(number) * scale
