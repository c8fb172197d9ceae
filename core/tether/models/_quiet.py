"""``quiet()``: no transformers progress bars (loading/writing shards) inside; tether shows its own progress."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No transformers progress bars inside (restored after)."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
