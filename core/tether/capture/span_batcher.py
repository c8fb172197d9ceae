"""Batches spans to the store off the hot path: ``submit`` returns at once, a background task writes.

The proxy submits one span per model call and the runner one per adapter event; both want the request that
produced the span to return without waiting for the store. A batch is written when ``max_batch`` spans are
pending or ``max_delay_s`` after the first pending one (or, with ``quiet_s``, as soon as no span was submitted
for that long: the submitters are idle, and writing then delays none of their work), by one writer at a time
so spans of an attempt reach the store in submission order. ``close`` writes everything still pending: no span
is lost on a clean shutdown. A batch the store rejects (a malformed span, a span of an attempt that timed out, a
body over an HTTP store's size cap) is retried in halves, in order, down to single spans, so one bad span costs
only itself; it is logged and counted in ``dropped``.

A span may also be submitted unbuilt, as a function that builds it (``submit_deferred``): it is built when its
batch is written, not on the caller's path. The proxy submits its calls' spans this way, so that answering a
burst of calls is not slowed by building their records; a builder that raises is logged and counted in
``dropped``, like a span the store rejected.

A store that fails (a server restarting, a database failing over) is retried with back-off for up to
``outage_s`` (60 s): spans are dropped only after that. A retry is idempotent: the first try may have been
committed with its answer lost, so before writing again the batcher reads which of the batch's spans the store
already holds (by span id) and writes only the others.

Spans waiting for their batch are not lost when the process is asked to end: the writer, cancelled while spans
are pending (``asyncio.run`` cancels every task when its main coroutine returns or gets ``KeyboardInterrupt`` from
SIGINT), writes them before it ends; and a batcher bound to a loop on the main thread installs a SIGTERM handler
on that loop (only where SIGTERM has its default action) that writes every open batcher's pending spans, then ends
the process by SIGTERM as before. Tether's synchronous entry points (``Trainer.fit``, ``dev``), whose loop runs on
a thread of its own, install the same from the main thread (``install_sigterm_flush``). What remains under
``kill -9`` is the window ``docs/store.md`` states.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from tether.store.base import Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound
from tether.store.retry import DEFAULT_OUTAGE_S, is_outage
from tether.types import Span

log = logging.getLogger(__name__)

#: how long a SIGTERM waits for the open batchers' pending spans before the process ends
SIGTERM_FLUSH_S = 10.0
#: the open batchers (a SIGTERM writes their pending spans first)
_open: weakref.WeakSet[SpanBatcher] = weakref.WeakSet()
#: the loops that have tether's SIGTERM handler
_handled: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()

#: the ``quiet_s`` of a batcher behind a proxy: the agents' calls come in bursts (one answer each, then the
#: next call), so 5 ms without an answered call means the burst is over and a write delays no call
PROXY_QUIET_S = 0.005


@dataclass(eq=False)
class SpanBatcher:
    """Writes submitted spans to ``store`` in batches. Bind it to an event loop by calling ``submit`` (or
    ``start``) from that loop first; afterwards ``submit`` may also be called from other threads."""

    store: Store
    max_batch: int = 256
    max_delay_s: float = 0.05
    _: KW_ONLY
    retries: int = 3
    retry_delay_s: float = 0.2
    outage_s: float = DEFAULT_OUTAGE_S
    quiet_s: float | None = None
    written: int = field(default=0, init=False)  # spans the store accepted
    dropped: int = field(default=0, init=False)  # spans the store rejected (logged)
    _last_submit: float = field(default=0.0, init=False)  # loop time of the last submit (for ``quiet_s``)
    _pending: list[Span | Callable[[], Span]] = field(default_factory=list, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _loop_thread: int | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _has_items: asyncio.Event | None = field(default=None, init=False)
    #: the writer waiting for a batch (``_wait_for_batch``)
    _waiter: asyncio.Future[None] | None = field(default=None, init=False)
    _write_lock: asyncio.Lock | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.max_delay_s < 0:
            raise ValueError(f"max_delay_s must be >= 0, got {self.max_delay_s}")
        if self.quiet_s is not None and self.quiet_s <= 0:
            raise ValueError(f"quiet_s must be > 0 (or None: wait max_delay_s), got {self.quiet_s}")

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        """Bind to the running loop and start the writer (``submit`` does this on first use)."""
        self._bind()

    def submit(self, span: Span) -> None:
        """Queue ``span`` for writing; never blocks. Thread-safe once the batcher is bound to its loop."""
        self._submit(span)

    def submit_deferred(self, build: Callable[[], Span]) -> None:
        """Queue the span ``build()`` returns, called when its batch is written (in submission order with the
        other spans); never blocks. ``build`` runs on the batcher's loop and must not depend on state that
        changes after this call."""
        self._submit(build)

    def _submit(self, span: Span | Callable[[], Span]) -> None:
        if self._closed:
            raise RuntimeError("SpanBatcher is closed: spans submitted after close() would be lost")
        if self._loop is None:
            self._bind()
        if threading.get_ident() == self._loop_thread:
            self._submit_here(span)
        else:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._submit_here, span)

    async def flush(self) -> None:
        """Write every span submitted so far; return when the store has them (or dropped them)."""
        if self._write_lock is None:
            return
        async with self._write_lock:
            while self._pending:
                await self._write_next()

    async def close(self) -> None:
        """Flush everything and stop the writer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._write_lock is None:
            return
        async with self._write_lock:  # the writer is idle while we hold this: cancelling loses nothing
            if self._task is not None:
                self._task.cancel()
                try:
                    await self._task
                except asyncio.CancelledError:
                    pass
                self._task = None
            while self._pending:
                await self._write_next()

    async def __aenter__(self) -> SpanBatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ----------------------------------------------------------------------------------------

    def _bind(self) -> None:
        if self._loop is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "SpanBatcher must first be used from its event loop (call `await batcher.start()` there)"
            ) from None
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._has_items = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._task = loop.create_task(self._run(), name="tether-span-batcher")
        _open.add(self)
        _handle_sigterm(loop)

    def _submit_here(self, span: Span | Callable[[], Span]) -> None:
        if self._task is None:  # closed while this call was on its way from another thread
            built = _build(span)
            if built is not None:
                self._drop(built, "submitted after close()")
            else:
                self.dropped += 1
            return
        self._pending.append(span)
        if self.quiet_s is not None:
            assert self._loop is not None
            self._last_submit = self._loop.time()
        assert self._has_items is not None
        self._has_items.set()
        if len(self._pending) >= self.max_batch:
            _wake(self._waiter)

    async def _run(self) -> None:
        assert self._has_items is not None and self._write_lock is not None
        try:
            while True:
                await self._has_items.wait()
                if len(self._pending) < self.max_batch and self.max_delay_s > 0:
                    await self._wait_for_batch()
                async with self._write_lock:
                    while self._pending:
                        await self._write_next()
                    self._has_items.clear()
        except asyncio.CancelledError:
            if not self._closed and self._pending:  # the loop is ending (not close(): it writes them itself)
                while self._pending:
                    await self._write_next()
            raise

    async def _wait_for_batch(self) -> None:
        """Until ``max_batch`` spans are pending, ``max_delay_s`` has passed, or no span came for ``quiet_s``.

        One timer and one future per wake-up (``asyncio.wait_for`` would add a task and a cancellation each
        time): with ``quiet_s``, a steady stream of spans wakes the writer every ``quiet_s``."""
        assert self._loop is not None
        loop = self._loop
        deadline = loop.time() + self.max_delay_s
        while len(self._pending) < self.max_batch:
            wake = deadline if self.quiet_s is None else min(deadline, self._last_submit + self.quiet_s)
            delay = wake - loop.time()
            if delay <= 0:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            timer = loop.call_later(delay, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None

    async def _write_next(self) -> None:
        """Write the oldest ``max_batch`` pending spans (the caller holds the write lock)."""
        pending = self._pending[: self.max_batch]
        del self._pending[: self.max_batch]
        batch = []
        for item in pending:
            span = item if type(item) is Span else _build(item)
            if span is None:
                self.dropped += 1
            else:
                batch.append(span)
        if batch:
            await self._write(batch)

    async def _write(self, batch: list[Span]) -> None:
        deadline = time.monotonic() + self.outage_s
        failed = False  # a try failed: it may have been committed anyway (its answer lost)
        attempt = 0
        while True:
            try:
                if failed:
                    batch = await self._not_yet_stored(batch)
                    if not batch:
                        return
                await self.store.add_spans(batch)
            except (InvalidInput, InvalidTransition) as exc:
                if len(batch) == 1:
                    self._drop(batch[0], f"the store rejected it: {exc}")
                    return
                half = len(batch) // 2  # halves, in order: a bad span is found in log2(n) steps, a big batch
                await self._write(batch[:half])  # refused for its size goes in pieces that fit
                await self._write(batch[half:])
                return
            except Exception as exc:
                delay = min(self.retry_delay_s * (2**attempt), 2.0)
                outage = is_outage(exc) and time.monotonic() + delay <= deadline
                if not outage and attempt >= self.retries:
                    for span in batch:
                        self._drop(span, f"the store failed {attempt + 1} times: {exc!r}")
                    return
                log.warning("writing %d spans failed (%r); retrying", len(batch), exc)
                failed = True
                attempt += 1
                await asyncio.sleep(delay)
            else:
                self.written += len(batch)
                return

    async def _not_yet_stored(self, batch: list[Span]) -> list[Span]:
        """The spans of ``batch`` whose ids their attempts do not hold yet (an outage raises, to retry)."""
        held: set[str] = set()
        for attempt_id in dict.fromkeys(s.attempt_id for s in batch):
            try:
                held.update(s.span_id for s in await self.store.get_spans(attempt_id))
            except NotFound:
                pass
        kept = [s for s in batch if s.span_id not in held]
        if len(kept) < len(batch):
            self.written += len(batch) - len(kept)
            log.info(
                "%d of %d spans were stored by a try whose answer was lost", len(batch) - len(kept), len(batch)
            )
        return kept

    def _drop(self, span: Span, why: str) -> None:
        self.dropped += 1
        log.error(
            "dropped span %s (%s %r, rollout %s, attempt %s): %s",
            span.span_id,
            span.kind,
            span.name,
            span.rollout_id,
            span.attempt_id,
            why,
        )


def _handle_sigterm(loop: asyncio.AbstractEventLoop) -> None:
    """On the main thread's loop, where SIGTERM has its default action: write the open batchers' pending spans
    on SIGTERM, then end the process by SIGTERM as it would have ended."""
    if loop in _handled or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the program handles SIGTERM itself (and should close its batchers)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, TypeError):  # Windows, a closed loop
        loop.add_signal_handler(signal.SIGTERM, _on_sigterm, loop)
        _handled.add(loop)


def _on_sigterm(loop: asyncio.AbstractEventLoop) -> None:
    loop.remove_signal_handler(signal.SIGTERM)
    loop.create_task(_flush_then_terminate(loop), name="tether-sigterm-flush")


async def _flush_then_terminate(loop: asyncio.AbstractEventLoop) -> None:
    batchers = [b for b in list(_open) if b._loop is loop and not b._closed]
    with contextlib.suppress(Exception):
        async with asyncio.timeout(SIGTERM_FLUSH_S):
            await asyncio.gather(*(b.flush() for b in batchers), return_exceptions=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def install_sigterm_flush() -> None:
    """From the main thread, where SIGTERM has its default action: on SIGTERM write the pending spans of every
    open batcher, whichever thread's loop runs it (for up to ``SIGTERM_FLUSH_S``), then end the process by
    SIGTERM. For synchronous callers whose batchers run on another thread's loop (``tether._loop``)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _sigterm_from_main_thread)


def _sigterm_from_main_thread(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    deadline = time.monotonic() + SIGTERM_FLUSH_S
    for batcher in list(_open):
        loop = batcher._loop
        if batcher._closed or loop is None or loop.is_closed() or batcher._loop_thread == threading.get_ident():
            continue
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(batcher.flush(), loop).result(max(0.0, deadline - time.monotonic()))
    os.kill(os.getpid(), signal.SIGTERM)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _build(item: Span | Callable[[], Span]) -> Span | None:
    """The span of a pending item: itself, or what its builder returns (None, logged, if the builder raised)."""
    if isinstance(item, Span):
        return item
    try:
        return item()
    except Exception:
        log.exception("dropped a span: building it raised")
        return None
