"""GRPO's trainer-vs-sampler drift: ``Drift`` sums it over an update's micro-batches (the ``drift_*`` metrics);
``Refusals`` keeps the rows whose drift says other weights sampled them out of the update."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class Refusals:
    """The rows of one micro-batch refused for their drift: a row whose tokens the trainer scores far from the
    sampler's recorded logprobs was not sampled by these weights (another policy's adapter, a retokenised
    reply), so its ratios and advantage would train on a lie. Judged on the first epoch's pass; kept in
    ``refused`` (batch index -> response tokens) for the later epochs."""

    def __init__(self, refused: dict[int, int], indices: Sequence[int]) -> None:
        self.refused = refused
        self.indices = list(indices)

    def judge(self, diff: torch.Tensor, measured: torch.Tensor, mask: torch.Tensor, limit: float) -> None:
        counts = measured.sum(dim=1)
        means = (diff.abs() * measured).sum(dim=1) / counts.clamp(min=1)
        for row in torch.nonzero((counts > 0) & (means > limit)).flatten().tolist():
            self.refused[self.indices[row]] = int(mask[row].sum())

    def keep(self, rows: int, device: torch.device) -> torch.Tensor:
        return torch.tensor([float(self.indices[r] not in self.refused) for r in range(rows)], device=device)


class Drift:
    """Sums of |trainer - sampler| logprob differences over the micro-batches of one update."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.tokens = 0
        self.total = 0.0
        self.largest = 0.0
        self.over = 0

    def add(self, diff: torch.Tensor) -> None:
        if diff.numel() == 0:
            return
        gap = diff.abs().float()
        self.tokens += gap.numel()
        self.total += float(gap.sum())
        self.largest = max(self.largest, float(gap.max()))
        self.over += int((gap > self.threshold).sum())

    def metrics(self) -> dict[str, float]:
        """``drift_tokens`` always; the figures only when some token had a recorded logprob."""
        if not self.tokens:
            return {"drift_tokens": 0.0}
        return {
            "drift_tokens": float(self.tokens),
            "drift_mean": self.total / self.tokens,
            "drift_max": self.largest,
            "drift_frac": self.over / self.tokens,
        }
