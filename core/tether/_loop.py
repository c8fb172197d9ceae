"""One long-lived event loop, on a daemon thread, behind tether's synchronous entry points.

Agents often build async model clients at import time, and those clients' connection pools bind to the
first event loop that uses them. Running every ``Trainer.dev`` / ``evaluate`` / ``fit`` call in a fresh
``asyncio.run`` loop would break the second call ("Event loop is closed"); running them all on one loop
does not. Code already inside an event loop should await the ``a*`` methods instead.

Agent code runs on this loop, and a ``SystemExit`` or ``KeyboardInterrupt`` raised in an asyncio task stops
the loop that runs it (asyncio re-raises both out of ``run_forever``). The runner fails the rollout of an
agent that raises one; one raised in a task the agent's framework started on its own is logged here and the
loop goes on, so no agent can leave ``run_sync`` waiting forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")
log = logging.getLogger(__name__)
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _ensure_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=_serve, args=(loop,), name="tether-loop", daemon=True).start()
            _loop = loop
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` for good: an exception out of ``run_forever`` (only SystemExit and KeyboardInterrupt get
    there, raised by a task) is logged and the loop resumes where it was."""
    while True:
        try:
            loop.run_forever()
            return  # stopped on purpose
        except BaseException as exc:
            log.error("a task on tether's event loop raised %s (%s); the loop goes on", type(exc).__name__, exc)


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on tether's loop and wait for it. Ctrl-C cancels it and waits for its clean-up."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError("called from inside an event loop: await the async variant (adev, aevaluate, afit)")
    future = asyncio.run_coroutine_threadsafe(coro, _ensure_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        try:
            future.result(timeout=60)
        except (concurrent.futures.CancelledError, Exception):
            pass
        raise
