"""Seeds derived from their parts, so a seeded run samples the same tokens whatever order its work runs in.

A seeded run (``Trainer(seed=...)``) gives each rollout its own seed, derived from the run seed, the batch, the
task and the rollout's index among that task's repeats (``tether.training.engine.session``); the runner derives
each attempt's seed from it, and the proxy each call's from the attempt's and the call's index in the attempt.
The backend draws a call's samples from that seed alone (``tether.models.local._sampling``), never from a generator
shared with other rollouts, so concurrent rollouts may run and batch in any order. See docs/reproducibility.md.
"""

from __future__ import annotations

import hashlib

#: seeds are non-negative and fit a signed 64-bit integer (what the OpenAI API and vLLM take)
SEED_BITS = 63


def derive_seed(*parts: int | str | None) -> int:
    """A seed from ``parts`` (ints, strings, None), stable across processes, machines and Python versions
    (no ``hash()``, which is salted per process)."""
    text = "\x1f".join("" if p is None else f"{type(p).__name__}:{p}" for p in parts)
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)
