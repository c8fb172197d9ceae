"""The SQLite and PostgreSQL stores' cache of the spans they wrote recently, kept frozen.

Training reads back every span its runners just wrote (``harvest``, ``get_spans``), and decoding an LLM
span's JSON (hundreds of token ids, each a new ``int``) is most of what a read costs. So the store keeps the
spans it committed, frozen (``tether.store._frozen``), by attempt, and a read thaws those instead of decoding
them. The file (or database) stays the truth: a read asks it which spans exist (the attempt's ``next_seq``)
and decodes only those the cache lacks (written by another process, or evicted). Spans never change once
written and attempt ids are never reused, so a cached span cannot go stale; harvested attempts are dropped.
The cache holds at most ``max_bytes`` of memory as its caller counts it (``_frozen.frozen_size``: the spans'
Python objects, several times their JSON), least recently used attempts evicted first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from tether.types import Span

__all__ = ["DEFAULT_SPAN_CACHE_BYTES", "SPAN_BYTES", "SpanCache"]

DEFAULT_SPAN_CACHE_BYTES = 64 * 1024 * 1024  # of memory: a training batch's spans, until harvested
SPAN_BYTES = 400  # what a cached span holds besides its attributes: the Span, its id strings, its cache slot


class SpanCache:
    """Frozen spans by attempt id and sequence, bounded by the memory they hold. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._attempts: OrderedDict[str, dict[int, Span]] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, spans: Iterable[tuple[Span, int]]) -> None:
        """Keep ``(span, bytes it holds)`` pairs; each span carries its sequence and frozen attributes."""
        if self.max_bytes <= 0:
            return
        with self._lock:
            for span, size in spans:
                attempt_id = span.attempt_id
                held = self._attempts.get(attempt_id)
                if held is None:
                    held = self._attempts[attempt_id] = {}
                    self._sizes[attempt_id] = 0
                else:
                    self._attempts.move_to_end(attempt_id)
                assert span.sequence is not None
                held[span.sequence] = span
                self._sizes[attempt_id] += size
                self._bytes += size
            while self._bytes > self.max_bytes and self._attempts:
                self._evict_oldest()

    def spans_of(self, attempt_id: str) -> dict[int, Span] | None:
        """A snapshot of the attempt's cached spans by sequence, or None when none is cached."""
        with self._lock:
            held = self._attempts.get(attempt_id)
            if held is None:
                return None
            self._attempts.move_to_end(attempt_id)
            return dict(held)

    def drop(self, attempt_ids: Iterable[str]) -> None:
        with self._lock:
            for attempt_id in attempt_ids:
                if self._attempts.pop(attempt_id, None) is not None:
                    self._bytes -= self._sizes.pop(attempt_id)

    def clear(self) -> None:
        with self._lock:
            self._attempts.clear()
            self._sizes.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def _evict_oldest(self) -> None:
        attempt_id, _ = self._attempts.popitem(last=False)
        self._bytes -= self._sizes.pop(attempt_id)
