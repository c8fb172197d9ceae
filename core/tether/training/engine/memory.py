"""The process's memory during training: ``rss_mb()`` (resident set, recorded per step), ``release()``
(hand freed heap memory back to the operating system after an update) and ``UpdateThread`` (the one thread a
run's updates all run on, each followed by ``release``; GRPO's and SFT's loops use it).

Why ``release``: torch's CPU tensors come from glibc's malloc. An update frees gigabytes of activations, but
the many allocations under glibc's mmap threshold (which glibc raises at run time, up to 32 MB) stay in the
heap arenas, fragmented, and the resident set grows step after step as each step's differently sized batch
reuses them imperfectly (measured with ``bench/memory.py``). ``malloc_trim(0)`` returns every free page of
every arena. A no-op where the C library is not glibc (macOS, musl) or on GPUs' memory.

Why one thread: ``asyncio.to_thread``'s pool may hand successive updates to different threads, and glibc gives
each thread its own arena, each keeping the activations it freed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def rss_mb() -> float | None:
    """The resident set size in MiB (Linux ``/proc``), or None elsewhere."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@cache
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


def release() -> None:
    """Return freed heap memory to the operating system (glibc's ``malloc_trim(0)``), where possible."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class UpdateThread:
    """One dedicated thread for every update of a run (``await updates.run(work)``), freed memory handed back
    after each (``release``); ``close()`` when the run ends."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tether-update")

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` on the update thread, then ``release()``."""

        def call() -> T:
            try:
                return work()
            finally:
                release()

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
