"""GRPO for models tether holds in torch (the embedded model and local Hugging Face checkpoints).

The loss is token-level over response tokens only: for each trainable transition, the recorded prompt and
response token ids are scored by the current policy; the importance ratio against the sampling policy's
logprobs (the trainer's own first pass for data the weights being updated sampled, the sampler's recorded ones
for older data) is clipped as in PPO and multiplied by the transition's advantage (its rollout's
group-relative advantage, see ``tether.training.signal.credit``). Every response token in the update batch
weighs the same. Optionally a KL penalty to the starting policy (k3 estimator) and, always, gradient
clipping. The model is updated in place, so the backend serves the new weights on its next batch.

Every update also measures **drift**: the trainer's logprobs of the sampled tokens (the first pass, before any
optimizer step, the same forward the loss uses) against the logprobs the sampler recorded, on tokens sampled by
the weights being updated. Transitions sampled by weights more than ``max_staleness`` versions old are
dropped (see ``GRPO``). The calls of a rollout that extend each other exactly are trained as one sequence
(``tether.training.signal.packing``). Sequences are packed into micro-batches by length under a token budget, with
optional gradient checkpointing, so the update of a large model fits one GPU; the gradient is the one-batch
gradient whatever the packing.

``GRPO.fit`` is the training loop of ``tether.algorithms.grpo.loop`` (steps, evaluation, checkpoints; GRPO is
its ``PolicyUpdate``) on the ``Session`` that ``Trainer.fit`` opens; rows are packed and scored by
``tether.algorithms.batching``. torch is imported here, so this module is loaded only when GRPO is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from tether.algorithms import batching
from tether.algorithms.grpo import loop as grpo_loop
from tether.algorithms.grpo.defaults import Reference, default_lr
from tether.algorithms.grpo.drift import Drift, Refusals
from tether.models.base import attach_lora
from tether.models.lora import LoRA
from tether.training.signal import packing, prefix
from tether.training.signal.packing import PackedSequence
from tether.types import Transition

if TYPE_CHECKING:
    from tether.models.base import ModelBackend


@dataclass
class GRPO(grpo_loop.PolicyUpdate):
    """Group Relative Policy Optimization.

    ``group_size`` rollouts are sampled per task; ``tasks_per_step`` tasks make one update batch.

    **Stale data.** Each transition records the weights version that sampled it. The update drops (and counts
    in the ``stale_dropped`` metric) transitions sampled by a version older than ``current - max_staleness``;
    with the default 0 only data from the weights being updated trains. Within the allowed staleness the
    importance correction is the PPO-clipped ratio ``exp(logp_now - logp_old)`` (clipped to ``1 ± clip_eps``)
    against the logprobs the sampler recorded, so tokens the policy has since moved away from weigh less and
    the step stays bounded. For data the weights being updated sampled, ``logp_old`` is the trainer's own first
    pass (as verl recomputes it): the same distribution to float rounding, so the first epoch's ratio is exactly
    1, and the update does not depend on how the sampler batched the rows (``docs/reproducibility.md``).
    Transitions whose version is unknown (a backend that does not report one) are kept.

    **Drift.** ``drift_mean`` / ``drift_max`` are the mean / largest absolute difference between the trainer's
    and the sampler's logprob of each sampled token, ``drift_frac`` the share of tokens where it exceeds
    ``drift_threshold`` (0.1 nats: a 10% disagreement on the token's probability), over the tokens with a
    recorded logprob sampled by the weights being updated (``drift_tokens`` of them). Identical weights and
    code give ~1e-6 (float rounding); a retokenized response or wrong token ids give whole nats. With several
    policies each update reports its own as ``drift_*/<policy>``. A call whose mean drift exceeds
    ``max_row_drift`` (0.5 nats; None: never) was not sampled by the weights being updated (a request served by
    another policy's adapter, a retokenised reply): it is refused, counted in ``drift_refused``, and the update
    is the one of the other calls (those packed with it in one sequence included).

    **Memory.** Rows (packed sequences) are sorted by length and packed into micro-batches of at most
    ``micro_batch`` rows and, when ``micro_batch_tokens`` is set, at most that many padded tokens (rows × the
    longest row); a single longer row goes alone. ``gradient_checkpointing=True`` recomputes each layer's
    activations in the backward pass instead of storing them (enabled once on the model, non-reentrant, so it
    works with a frozen base and LoRA adapters). Neither changes the gradient.

    **Packing.** With ``pack=True`` (the default) the calls of one rollout attempt on this policy whose next
    prompt's token ids begin exactly with the previous call's prompt + response ids train as one sequence
    (``tether.training.signal.packing``): the shared history is computed once, each call keeps its own advantage,
    recorded logprobs, drift judgement and on-policy flag, and the loss and gradient are the per-call rows'
    (to float rounding). A call that does not extend its predecessor exactly starts a new sequence.
    ``pack=False`` trains one row per call. With ``share_prefix=True`` (the default) the token ids every row of
    a micro-batch begins with (an agent's system prompt and tools, a group's task) are computed once and their
    key/value cache repeated across the rows (``tether.training.signal.prefix``): the same loss and gradient to
    float rounding (not with ``gradient_checkpointing``). ``sequences``, ``tokens_trained`` (response tokens),
    ``tokens_shared`` (prefix tokens computed once instead of once per row), ``tokens_computed`` and
    ``tokens_saved`` (what per-call rows would have computed, less that) say what it did.

    ``lora=tether.LoRA(...)`` trains LoRA adapters on the backend's model instead of all its weights.

    **Defaults by model.** ``lr=None`` picks the learning rate by what trains: LoRA adapters 5e-4 (2e-4 on a base
    of 1B parameters or more); all weights 5e-4 under 50M parameters (the embedded model), 1e-5 up to 1B, 1e-6
    above (``tether.algorithms.grpo.defaults``; the ``lr`` metric says which). ``kl_coef > 0`` holds the policy
    near its start: with LoRA the base with its adapters off (no copy), with full weights a frozen copy.

    **Policies.** With ``tether.wrap(optimize={policy: [sub-agents]})`` each policy has its own weights: a
    step's transitions are grouped by policy and each trained policy with transitions gets its own update
    (inside ``backend.policy(name)``, with its own optimizer); metrics are reported per policy as
    ``<metric>/<policy>`` beside the step's totals. ``policies`` names the policies this GRPO trains (None:
    every policy of the wrapped agent); transitions of other policies, and of the frozen sub-agents, never
    update weights.
    """

    group_size: int = 8
    tasks_per_step: int = 8
    lr: float | None = None  # None: by what trains, see tether.algorithms.grpo.defaults
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch: int = 32  # rows per micro-batch, at most
    epochs: int = 1  # passes over each batch (ratios move away from 1 after the first)
    temperature: float = 1.0  # sampling temperature of training rollouts (the recorded logprobs' distribution)
    scale_by_std: bool = True
    weight_decay: float = 0.0
    # -- data freshness, drift, memory (see the class docstring) -------------------------------------------
    max_staleness: int = 0  # versions a transition's weights may lag the current ones and still train
    drift_threshold: float = 0.1  # |trainer - sampler| logprob above which a token counts in drift_frac
    max_row_drift: float | None = 0.5  # a row's mean |trainer - sampler| logprob above which it is refused
    micro_batch_tokens: int | None = None  # padded tokens per micro-batch, at most (None: no budget)
    gradient_checkpointing: bool = False
    pack: bool = True  # train the calls of a rollout that extend each other exactly as one sequence
    share_prefix: bool = True  # compute a micro-batch's common prompt prefix once (tether.training.signal.prefix)
    lora: LoRA | None = None
    policies: Sequence[str] | None = None  # the policies this GRPO trains (None: all the agent's)
    _optimizer: Any = field(default=None, init=False, repr=False)
    _policy_optimizers: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _reference: Reference = field(default_factory=Reference, init=False, repr=False)
    #: the smallest group this update learns from (a group-relative advantage needs two rollouts to compare)
    min_group_size: ClassVar[int] = 2

    def __post_init__(self) -> None:
        if self.group_size < self.min_group_size:
            raise ValueError(
                f"{type(self).__name__} needs group_size >= {self.min_group_size}"
                f"{' to compare rollouts of a task' if self.min_group_size > 1 else ''}, got {self.group_size}"
            )
        if self.tasks_per_step < 1:
            raise ValueError(f"tasks_per_step must be >= 1, got {self.tasks_per_step}")
        if self.lr is not None and not self.lr >= 0:
            raise ValueError(f"GRPO needs lr >= 0 (or None: a default by what trains), got {self.lr}")
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1 (rows per micro-batch), got {self.micro_batch}")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(
                f"micro_batch_tokens must be a positive token budget or None, got {self.micro_batch_tokens}"
            )
        if self.max_staleness < 0:
            raise ValueError(
                f"max_staleness must be >= 0 (0: only the current weights' data), got {self.max_staleness}"
            )
        if not self.drift_threshold > 0:
            raise ValueError(f"drift_threshold must be > 0 (nats), got {self.drift_threshold}")
        if self.max_row_drift is not None and not self.max_row_drift > 0:
            raise ValueError(f"max_row_drift must be > 0 (nats) or None (refuse no row), got {self.max_row_drift}")
        if self.policies is not None:
            if isinstance(self.policies, str):
                self.policies = [self.policies]
            self.policies = list(self.policies)
            if not self.policies or not all(isinstance(p, str) and p for p in self.policies):
                raise ValueError(f"policies= takes policy names (non-empty strings), got {self.policies!r}")

    # -- the algorithm contract (fit, check_session, preflight_group: grpo_loop.PolicyUpdate's) ---------------

    def prepare_backend(self, backend: ModelBackend) -> None:
        """Before the backend starts (``Trainer.fit`` calls it): attach the LoRA adapters, if any. A vLLM
        backend trains only LoRA adapters (the server cannot take full weights between updates): say so now,
        not at the first update."""
        if self.lora is None:
            from tether.models.vllm import VLLMBackend  # no vLLM import: it only drives a server

            if isinstance(backend, VLLMBackend):
                raise ValueError(
                    "GRPO trains a vllm: model through LoRA adapters that the server swaps in: pass "
                    "lora=tether.LoRA(...) (full-weight training with vLLM goes through tether.VERL)"
                )
            return
        attach_lora(backend, self.lora, "GRPO", "model='embedded', 'hf:<path>' or 'vllm:<model>'")

    # -- state ---------------------------------------------------------------------------------------------

    def optimizer_for(self, model: torch.nn.Module, policy: str | None = None) -> torch.optim.Optimizer:
        """The optimizer of ``model``'s trainable parameters: one per policy (None: the one shared policy)."""
        held = self._optimizer if policy is None else self._policy_optimizers.get(policy)
        if held is None:
            params = [p for p in model.parameters() if p.requires_grad]
            lr = self.lr if self.lr is not None else default_lr(model)
            held = torch.optim.AdamW(params, lr=lr, weight_decay=self.weight_decay)
            if policy is None:
                self._optimizer = held
            else:
                self._policy_optimizers[policy] = held
        return held

    def state_dict(self) -> dict[str, Any]:
        shared = self._optimizer.state_dict() if self._optimizer is not None else None
        state: dict[str, Any] = {"optimizer": shared}
        if self._policy_optimizers:
            state["policies"] = {name: opt.state_dict() for name, opt in self._policy_optimizers.items()}
        return state

    def load_state_dict(self, model: torch.nn.Module, state: dict[str, Any], policy: str | None = None) -> None:
        """Restore the optimizer of ``policy`` (None: the shared policy's) for ``model``, if ``state`` holds it."""
        held = state.get("optimizer") if policy is None else (state.get("policies") or {}).get(policy)
        if held is not None:
            self.optimizer_for(model, policy).load_state_dict(held)

    # -- the update ----------------------------------------------------------------------------------------

    def update(
        self,
        model: torch.nn.Module,
        transitions: Sequence[Transition],
        *,
        pad_token_id: int = 0,
        weights_version: int | None = None,
        policy: str | None = None,
    ) -> dict[str, float]:
        """One policy update on trainable transitions with a non-zero advantage; returns metrics. ``policy``
        picks the optimizer (None: the one shared policy's); the caller passes only that policy's transitions.

        ``weights_version`` is the version of the weights being updated (the backend's): transitions sampled
        by a version older than ``weights_version - max_staleness`` are dropped; None keeps them all. Call it
        inside ``backend.policy()``, which holds the weights so no batch samples half-updated ones.
        """
        candidates = [t for t in transitions if self.trains(t)]
        batch = [t for t in candidates if not self._stale(t, weights_version)]
        metrics = {
            "trained_transitions": float(len(batch)),
            "stale_dropped": float(len(candidates) - len(batch)),
            "loss": 0.0,
            "grad_norm": 0.0,
            "clip_frac": 0.0,
            "drift_tokens": 0.0,
        }
        if not batch:
            return metrics
        context_length = batching.context_length(model)
        if self.kl_coef > 0:
            self._reference.prepare(model)
        if self.gradient_checkpointing:
            _enable_checkpointing(model)
        optimizer = self.optimizer_for(model, policy)
        total_tokens = sum(min(len(t.response_token_ids), context_length - 1) for t in batch)
        sequences = packing.pack_calls(batch, context_length, merge=self.pack)
        sharing = batching.shares_prefix(model, self.share_prefix)  # (after checkpointing is turned on)
        parts = batching.micro_batches(sequences, self.micro_batch, self.micro_batch_tokens, sharing)
        on_policy = [weights_version is None or t.weights_version in (None, weights_version) for t in batch]
        drift = Drift(self.drift_threshold)
        refused: dict[int, int] = {}  # batch index -> response tokens, of calls refused for their drift
        was_training = model.training
        model.train()
        first_pass: dict[int, torch.Tensor] = {}  # micro-batch -> the trainer's logprobs before any step
        for epoch in range(self.epochs):
            optimizer.zero_grad(set_to_none=True)
            sums = {"loss": 0.0, "clipped": 0.0, "kl": 0.0}
            for k, indices in enumerate(parts):
                loss, clipped, kl = self._micro_loss(
                    model,
                    [sequences[i] for i in indices],
                    batch,
                    total_tokens,
                    pad_token_id,
                    drift if epoch == 0 else None,
                    on_policy,
                    Refusals(refused),
                    (first_pass, k),
                )
                loss.backward()
                sums["loss"] += float(loss.detach())
                sums["clipped"] += clipped
                sums["kl"] += kl
            kept = total_tokens - sum(refused.values())
            if kept <= 0:  # every row refused: no step
                optimizer.zero_grad(set_to_none=True)
                grad_norm = torch.tensor(0.0)
                break
            if refused:  # the loss was divided by every row's tokens: the loss and gradient of the kept rows alone
                sums["loss"] *= total_tokens / kept
                for param in model.parameters():
                    if param.grad is not None:
                        param.grad.mul_(total_tokens / kept)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
            optimizer.step()
        model.train(was_training)
        metrics["trained_transitions"] = float(len(batch) - len(refused))
        metrics.update(
            drift_refused=float(len(refused)),
            loss=sums["loss"],
            grad_norm=float(grad_norm) if math.isfinite(float(grad_norm)) else float("nan"),
            clip_frac=sums["clipped"] / max(total_tokens, 1),
            kl=sums["kl"] / max(total_tokens, 1),
            response_tokens=float(total_tokens),
            micro_batches=float(len(parts)),
            lr=float(optimizer.param_groups[0]["lr"]),
            **packing.metrics(
                sequences,
                batch,
                context_length,
                total_tokens - sum(refused.values()),
                prefix.shared_tokens([[sequences[i] for i in part] for part in parts]) if sharing else 0,
            ),
            **drift.metrics(),
        )
        return metrics

    def trains(self, transition: Transition) -> bool:
        """Whether ``update`` trains ``transition``: a trainable call with response tokens and, for GRPO, a
        non-zero advantage (a subclass with its own per-token signal, ``tether.Distill``, needs none)."""
        return bool(transition.trainable and transition.advantage and transition.response_token_ids)

    def token_advantages(
        self, ids: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, old: torch.Tensor
    ) -> torch.Tensor:
        """Each position's advantage, shaped as ``mask``: GRPO's is ``adv``, each call's own on its tokens.
        ``ids`` are the rows' token ids, ``old`` the sampling policy's logprob of each next token (the ratio's
        denominator); a subclass computes its own per-token signal from them (``tether.Distill``: the teacher's
        logprob minus ``old``)."""
        del ids, mask, old
        return adv

    def _stale(self, transition: Transition, current: int | None) -> bool:
        version = transition.weights_version
        return current is not None and version is not None and version < current - self.max_staleness

    def _micro_loss(
        self,
        model: torch.nn.Module,
        part: Sequence[PackedSequence],
        batch: Sequence[Transition],
        total_tokens: int,
        pad_token_id: int,
        drift: Drift | None = None,
        on_policy: Sequence[bool] = (),
        refusals: Refusals | None = None,
        first_pass: tuple[dict[int, torch.Tensor], int] | None = None,
    ) -> tuple[torch.Tensor, float, float]:
        """The loss of one micro-batch (packed sequences of calls of ``batch``; ``on_policy`` per call of
        ``batch``). ``first_pass`` (the update's record, this micro-batch's key) keeps the trainer's logprobs of
        its first pass: the ratio's denominator for calls the weights being updated sampled."""
        device = next(model.parameters()).device
        ids, mask, old, adv, owner = (x.to(device) for x in batching.assemble(part, batch, pad_token_id))
        new = batching.token_logprobs(model, ids, self.temperature, mask, share_prefix=self.share_prefix)
        recorded = ~torch.isnan(old)
        calls = torch.tensor([bool(x) for x in on_policy] or [True] * len(batch), dtype=torch.bool, device=device)
        rows = calls[owner.clamp(min=0)] & (owner >= 0)  # positions predicting a token the current weights sampled
        if drift is not None:
            drift.add((new.detach() - old)[recorded & (mask > 0) & rows])
            if refusals is not None and self.max_row_drift is not None:
                refusals.judge(new.detach() - old, recorded & (mask > 0) & rows, owner, self.max_row_drift)
        if refusals is not None:
            mask = mask * refusals.keep(owner)
        own = new.detach() if first_pass is None else first_pass[0].setdefault(first_pass[1], new.detach())
        # the ratio's denominator: for rows the current weights sampled, the trainer's own first-pass logprobs
        # (the same distribution as the sampler's, to float rounding, and independent of how the sampler batched
        # them, so a seeded run's weights do not depend on the sampler's last bits); for older rows, and only
        # where the sampler recorded one, the sampler's logprob
        old = torch.where(recorded & ~rows, old, own)
        ratio = torch.exp(new - old)
        clipped_ratio = ratio.clamp(1 - self.clip_eps, 1 + self.clip_eps)
        token_adv = self.token_advantages(ids, mask, adv, old)
        per_token = -torch.minimum(ratio * token_adv, clipped_ratio * token_adv)
        kl_sum = 0.0
        if self.kl_coef > 0:
            with torch.no_grad(), self._reference.model(model) as reference:
                ref = batching.token_logprobs(
                    reference, ids, self.temperature, mask, share_prefix=self.share_prefix
                )
            log_ratio = ref - new
            kl = torch.exp(log_ratio) - log_ratio - 1
            per_token = per_token + self.kl_coef * kl
            kl_sum = float((kl.detach() * mask).sum())
        loss = (per_token * mask).sum() / total_tokens
        clipped = float((((ratio - clipped_ratio).abs() > 1e-6).float() * mask).sum())
        return loss, clipped, kl_sum


def _enable_checkpointing(model: torch.nn.Module) -> None:
    """Turn on non-reentrant activation (gradient) checkpointing once: it needs no input that requires grad, so
    a frozen base with LoRA adapters works. transformers 5 names it ``activation_checkpointing_*`` (the
    ``gradient_checkpointing_*`` names are deprecated aliases there, the only ones before)."""
    for enable_name, flag_name, kwargs_name in (
        ("activation_checkpointing_enable", "is_activation_checkpointing", "activation_checkpointing_kwargs"),
        ("gradient_checkpointing_enable", "is_gradient_checkpointing", "gradient_checkpointing_kwargs"),
    ):
        enable = getattr(model, enable_name, None)
        if enable is not None:
            if not getattr(model, flag_name, False):
                enable(**{kwargs_name: {"use_reentrant": False}})
            return
    raise ValueError(
        f"gradient_checkpointing=True needs a transformers model; {type(model).__name__} has no "
        "activation_checkpointing_enable(): set GRPO(gradient_checkpointing=False)"
    )
