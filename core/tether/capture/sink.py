"""The span sink the runner gives to adapters and tracers: stamps each span with the current rollout and
attempt (from context) and hands it to a ``SpanBatcher``, from any thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from tether import spans
from tether.capture.context import current_scope
from tether.types import Span, SpanKind

if TYPE_CHECKING:
    from tether.capture.span_batcher import SpanBatcher


class RolloutSink:
    """A ``SpanSink`` bound to one event loop. Spans emitted outside any rollout are counted and dropped."""

    def __init__(self, batcher: SpanBatcher, loop: asyncio.AbstractEventLoop) -> None:
        self._batcher = batcher
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._rewards: dict[str, list[float]] = defaultdict(list)
        self.dropped_outside_rollout = 0

    def emit(
        self,
        kind: SpanKind,
        name: str,
        attributes: dict[str, Any],
        *,
        agent_name: str | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        parent_id: str | None = None,
    ) -> None:
        scope = current_scope.get()
        if scope is None:
            self.dropped_outside_rollout += 1
            return
        now = time.time()
        span = Span(
            rollout_id=scope.rollout_id,
            attempt_id=scope.attempt_id,
            kind=SpanKind(kind),
            name=name,
            agent_name=agent_name,
            attributes=attributes,
            parent_id=parent_id,
            start_time=start_time if start_time is not None else now,
            end_time=end_time if end_time is not None else now,
        )
        if span.kind == SpanKind.REWARD and not attributes.get(spans.REWARD_FINAL):
            self._rewards[scope.attempt_id].append(float(attributes.get(spans.REWARD_VALUE, 0.0)))
        if threading.get_ident() == self._loop_thread:
            self._batcher.submit(span)
        else:  # framework callbacks on worker threads
            self._loop.call_soon_threadsafe(self._batcher.submit, span)

    def pop_rewards(self, attempt_id: str) -> list[float]:
        """The rewards emitted by agent code during an attempt (and forget them)."""
        return self._rewards.pop(attempt_id, [])

    async def flush(self) -> None:
        # let call_soon_threadsafe submissions queued by worker threads land first
        await asyncio.sleep(0)
        await self._batcher.flush()
