"""Riding out a store outage: retry a store call with back-off while the store is unreachable.

A store server restarted, a PostgreSQL failover, a SQLite file locked past its busy timeout: each makes calls
raise ``StoreError`` for a few seconds. Work that is already done (an attempt's outcome, its spans) must not be
thrown away for that, so its writers retry for up to ``outage_s`` (60 s by default). Only failures of the
store itself are retried: ``InvalidInput``, ``InvalidTransition`` and ``NotFound`` are answers, not outages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tether.store.errors import InvalidInput, InvalidTransition, NotFound, StoreError

_T = TypeVar("_T")
log = logging.getLogger(__name__)

#: how long a writer keeps retrying a store that fails (an outage of at least 30 s is ridden out)
DEFAULT_OUTAGE_S = 60.0
_FIRST_DELAY_S, _MAX_DELAY_S = 0.1, 2.0


def is_outage(exc: BaseException) -> bool:
    """True for a failure of the store itself (worth retrying), False for the store's answer to the call."""
    return isinstance(exc, StoreError) and not isinstance(exc, InvalidInput | InvalidTransition | NotFound)


async def retry_outage(call: Callable[[], Awaitable[_T]], what: str, outage_s: float = DEFAULT_OUTAGE_S) -> _T:
    """``await call()``, retried with back-off (0.1 s doubling to 2 s) while it fails with an outage, for up
    to ``outage_s`` seconds; then the last error is raised."""
    deadline = time.monotonic() + outage_s
    delay = _FIRST_DELAY_S
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_outage(exc) or time.monotonic() + delay > deadline:
                raise
            log.warning("%s: the store failed (%s); retrying in %.1f s", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY_S)
