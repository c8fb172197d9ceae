"""Issue 37 item 2, with torch: ``device=cuda`` / ``cuda:N`` pass the ``Trainer``'s check only when torch sees
that GPU here; ``HFBackend(threads=...)`` itself is bounded by this process's cores."""

from __future__ import annotations

import pytest
import torch

import tether
from tether.models._spec import usable_cores
from tether.models.hf import HFBackend


def test_cuda_devices_must_exist_here() -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        for device in ("cuda", "cuda:0"):
            with pytest.raises(ValueError, match=rf"'{device}' asks for a GPU, but torch sees none"):
                tether.Trainer(model=f"hf:some/model?device={device}")
    else:
        tether.Trainer(model="hf:some/model?device=cuda:0")
    with pytest.raises(ValueError, match=rf"bad option 'device=cuda:{count}'.*device takes cpu, cuda or cuda:N"):
        tether.Trainer(model=f"hf:some/model?device=cuda:{count}")


def test_the_backend_bounds_threads_too() -> None:
    with pytest.raises(ValueError, match=rf"threads=65536.*an integer from 1 to {usable_cores()}"):
        HFBackend("some/model", threads=65536)
