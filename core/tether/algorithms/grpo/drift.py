"""GRPO's trainer-vs-sampler drift: ``Drift`` sums it over an update's micro-batches (the ``drift_*`` metrics);
``Refusals`` keeps the calls whose drift says other weights sampled them out of the update."""

from __future__ import annotations

import torch


class Refusals:
    """The calls of one update refused for their drift: a call whose tokens the trainer scores far from the
    sampler's recorded logprobs was not sampled by these weights (another policy's adapter, a retokenised
    reply), so its ratios and advantage would train on a lie. Judged per call (``owner``: the call of each
    position, as ``batching.assemble`` gives it), so one refused call of a packed sequence leaves the others
    training. Judged on the first epoch's pass; kept in ``refused`` (batch index -> response tokens) for the
    later epochs."""

    def __init__(self, refused: dict[int, int]) -> None:
        self.refused = refused

    def judge(self, diff: torch.Tensor, measured: torch.Tensor, owner: torch.Tensor, limit: float) -> None:
        """Refuse the calls whose mean ``|diff|`` over their ``measured`` positions exceeds ``limit``."""
        calls = owner[owner >= 0]
        if calls.numel() == 0:
            return
        size = int(calls.max()) + 1
        picked = measured & (owner >= 0)
        counts = torch.bincount(owner[picked], minlength=size)
        sums = torch.bincount(owner[picked], weights=diff.abs()[picked].double(), minlength=size)
        tokens = torch.bincount(calls, minlength=size)
        means = sums / counts.clamp(min=1)
        for call in torch.nonzero((counts > 0) & (means > limit)).flatten().tolist():
            self.refused[call] = int(tokens[call])

    def keep(self, owner: torch.Tensor) -> torch.Tensor:
        """1.0 at positions of calls not refused (and where no call owns the position), 0.0 at refused ones."""
        if not self.refused:
            return torch.ones(owner.shape, device=owner.device)
        refused = torch.tensor(sorted(self.refused), device=owner.device)
        return (~torch.isin(owner, refused)).float()


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
