"""GRPO for models tether holds in torch (the embedded model and local Hugging Face checkpoints).

The loss is token-level over response tokens only: for each trainable transition, the recorded prompt and
response token ids are scored by the current policy; the importance ratio against the recorded logprobs (the
sampling policy's) is clipped as in PPO and multiplied by the transition's advantage (its rollout's
group-relative advantage, see ``tether.algorithms.advantages``). Every response token in the update batch
weighs the same. Optionally a KL penalty to the starting policy (k3 estimator) and, always, gradient
clipping. The model is updated in place, so the backend serves the new weights on its next batch.

``GRPO.fit`` runs the training loop of ``tether.algorithms.grpo_loop`` (steps, evaluation, checkpoints) on
the ``Session`` that ``Trainer.fit`` opens. torch is imported here, so this module is loaded only when GRPO is
used.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from tether.algorithms import grpo_loop
from tether.lora import LoRA
from tether.result import FitResult
from tether.types import Task, Transition

if TYPE_CHECKING:
    from tether.models.base import ModelBackend
    from tether.session import Session


@dataclass
class GRPO:
    """Group Relative Policy Optimization.

    ``group_size`` rollouts are sampled per task; ``tasks_per_step`` tasks make one update batch.
    ``lora=tether.LoRA(...)`` trains LoRA adapters on the backend's model instead of all its weights.
    """

    group_size: int = 8
    tasks_per_step: int = 8
    lr: float = 5e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch: int = 32
    epochs: int = 1  # passes over each batch (ratios move away from 1 after the first)
    temperature: float = 1.0  # sampling temperature of training rollouts (the recorded logprobs' distribution)
    scale_by_std: bool = True
    weight_decay: float = 0.0
    lora: LoRA | None = None
    _optimizer: Any = field(default=None, init=False, repr=False)
    _reference: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"GRPO needs group_size >= 2 to compare rollouts of a task, got {self.group_size}")
        if self.tasks_per_step < 1:
            raise ValueError(f"tasks_per_step must be >= 1, got {self.tasks_per_step}")

    # -- the algorithm contract ----------------------------------------------------------------------------

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """Train ``session.backend`` (a ``TrainableBackend``) for ``session.settings.steps`` steps."""
        return await grpo_loop.fit(self, session, train, val)

    def prepare_backend(self, backend: ModelBackend) -> None:
        """Before the backend starts (``Trainer.fit`` calls it): attach the LoRA adapters, if any."""
        if self.lora is None:
            return
        attach = getattr(backend, "attach_lora", None)
        if attach is None:
            raise ValueError(
                f"GRPO(lora=...) needs a backend that can hold LoRA adapters (model='embedded', 'hf:<path>' or "
                f"'vllm:<model>'); the {type(backend).__name__} cannot"
            )
        attach(self.lora)

    async def evaluate(self, session: Session, tasks: Sequence[Task]) -> dict[str, Any]:
        """Accuracy (mean reward) on ``tasks`` greedy and at temperature 1, as the loop records it."""
        return await grpo_loop.evaluate(session, tasks)

    # -- state ---------------------------------------------------------------------------------------------

    def optimizer_for(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        if self._optimizer is None:
            params = [p for p in model.parameters() if p.requires_grad]
            self._optimizer = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        return self._optimizer  # type: ignore[no-any-return]

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self._optimizer.state_dict() if self._optimizer is not None else None}

    def load_state_dict(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        if state.get("optimizer") is not None:
            self.optimizer_for(model).load_state_dict(state["optimizer"])

    # -- the update ----------------------------------------------------------------------------------------

    def update(
        self,
        model: torch.nn.Module,
        transitions: Sequence[Transition],
        *,
        pad_token_id: int = 0,
    ) -> dict[str, float]:
        """One policy update on trainable transitions with a non-zero advantage; returns metrics.

        Call it inside ``backend.policy()``, which holds the weights so no batch samples half-updated ones.
        """
        batch = [t for t in transitions if t.trainable and t.advantage and t.response_token_ids]
        metrics = {"trained_transitions": float(len(batch)), "loss": 0.0, "grad_norm": 0.0, "clip_frac": 0.0}
        if not batch:
            return metrics
        context_length = int(getattr(getattr(model, "config", None), "max_position_embeddings", 1 << 30))
        if self.kl_coef > 0 and self._reference is None:
            self._reference = copy.deepcopy(model).eval().requires_grad_(False)
        optimizer = self.optimizer_for(model)
        total_tokens = sum(min(len(t.response_token_ids), context_length - 1) for t in batch)
        was_training = model.training
        model.train()
        for _ in range(self.epochs):
            optimizer.zero_grad(set_to_none=True)
            sums = {"loss": 0.0, "clipped": 0.0, "kl": 0.0}
            for start in range(0, len(batch), self.micro_batch):
                part = batch[start : start + self.micro_batch]
                loss, clipped, kl = self._micro_loss(model, part, total_tokens, context_length, pad_token_id)
                loss.backward()
                sums["loss"] += float(loss.detach())
                sums["clipped"] += clipped
                sums["kl"] += kl
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
            optimizer.step()
        model.train(was_training)
        metrics.update(
            loss=sums["loss"],
            grad_norm=float(grad_norm) if math.isfinite(float(grad_norm)) else float("nan"),
            clip_frac=sums["clipped"] / max(total_tokens, 1),
            kl=sums["kl"] / max(total_tokens, 1),
            response_tokens=float(total_tokens),
        )
        return metrics

    def _micro_loss(
        self,
        model: torch.nn.Module,
        part: Sequence[Transition],
        total_tokens: int,
        context_length: int,
        pad_token_id: int,
    ) -> tuple[torch.Tensor, float, float]:
        ids, mask, old, adv = _assemble(part, context_length, pad_token_id)
        device = next(model.parameters()).device
        ids, mask, old, adv = ids.to(device), mask.to(device), old.to(device), adv.to(device)
        new = _token_logprobs(model, ids, self.temperature)
        old = torch.where(torch.isnan(old), new.detach(), old)  # no recorded logprob: on-policy ratio of 1
        ratio = torch.exp(new - old)
        clipped_ratio = ratio.clamp(1 - self.clip_eps, 1 + self.clip_eps)
        per_token = -torch.minimum(ratio * adv[:, None], clipped_ratio * adv[:, None])
        kl_sum = 0.0
        if self._reference is not None:
            with torch.no_grad():
                ref = _token_logprobs(self._reference, ids, self.temperature)
            log_ratio = ref - new
            kl = torch.exp(log_ratio) - log_ratio - 1
            per_token = per_token + self.kl_coef * kl
            kl_sum = float((kl * mask).sum())
        loss = (per_token * mask).sum() / total_tokens
        clipped = float((((ratio - clipped_ratio).abs() > 1e-6).float() * mask).sum())
        return loss, clipped, kl_sum


def _assemble(
    part: Sequence[Transition], context_length: int, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + response`` ids, and per-position (shifted by one: the position that predicts
    each token) response mask, recorded logprobs (NaN where missing) and advantages."""
    rows = []
    for t in part:
        response = list(t.response_token_ids)[: context_length - 1]
        prompt = list(t.prompt_token_ids)[-(context_length - len(response)) :] if t.prompt_token_ids else []
        if not prompt:
            raise ValueError(
                f"transition {t.rollout_id}/{t.step} has no prompt token ids: the backend did not return them, "
                "so it cannot be trained by GRPO (use the embedded, hf or vllm backend)"
            )
        logprobs = list(t.logprobs or [])[: len(response)]
        logprobs += [math.nan] * (len(response) - len(logprobs))
        rows.append((prompt, response, logprobs, float(t.advantage or 0.0)))
    width = max(len(p) + len(r) for p, r, _, _ in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    old = torch.zeros(len(rows), width - 1)
    for i, (prompt, response, logprobs, _) in enumerate(rows):
        n_p, n_r = len(prompt), len(response)
        ids[i, : n_p + n_r] = torch.tensor(prompt + response)
        mask[i, n_p - 1 : n_p - 1 + n_r] = 1.0
        old[i, n_p - 1 : n_p - 1 + n_r] = torch.tensor(logprobs)
    adv = torch.tensor([a for _, _, _, a in rows])
    return ids, mask, old, adv


def _token_logprobs(model: torch.nn.Module, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probability of each next token ``ids[:, 1:]`` under ``model`` at ``temperature``."""
    logits = model(input_ids=ids).logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
