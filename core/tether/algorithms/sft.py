"""``tether.SFT``: supervised fine-tuning of the embedded or ``hf:`` model on the LLM calls of finished
rollouts — traces imported from production (OTLP, ``tether import``) or rollouts tether captured.

``SFT.fit`` reads the rollouts of ``source`` (a store URL; None: the session's store), keeps those the filter
passes (``tether.algorithms.sft_data``), tokenizes the calls that have no token ids with the model's chat
template (recorded in the ``retokenized`` metric), then trains for ``epochs`` passes: batches of
``batch_size`` calls, each one optimizer step (a rollout's calls that extend each other exactly trained as one
sequence: ``pack``), packed into micro-batches of at most ``micro_batch`` rows (and
``micro_batch_tokens`` padded tokens) whose gradients add up to the batch's, every step on one dedicated
thread with freed memory handed back after it (``memory.UpdateThread``, as GRPO's). The loss is the mean negative
log-likelihood of the reply tokens only (the prompt is context). Every step is logged to the run's
``metrics.jsonl`` with the progress bar; validation tasks, if given, run before and after; the weights and
optimizer are checkpointed at the end. torch is imported here, so this module loads only when SFT is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tether.algorithms import batching
from tether.algorithms.base import Algorithm
from tether.algorithms.evaluation import carried_eval, evaluate
from tether.algorithms.grpo.policies import trained_policies, update_policies
from tether.algorithms.sft_data import Example, Filter, read_finished, select, tokenize
from tether.models.base import RendersReplies, TrainableBackend
from tether.store import open_store
from tether.training.engine import memory
from tether.training.run.progress import FitProgress
from tether.training.run.result import FitResult
from tether.training.signal import packing, prefix
from tether.types import Task, Transition

if TYPE_CHECKING:
    from tether.training.engine.session import Session


@dataclass
class SFT(Algorithm):
    """Supervised fine-tuning on selected calls of imported or captured rollouts.

    ``source``: the store URL to read rollouts from (``http://...`` of a ``tether store serve`` that received
    OTLP traces, ``sqlite:///...``); None reads the session's store (``Trainer(store=...)``).
    ``min_reward``: keep rollouts whose reward is at least this (rollouts without a reward are dropped).
    ``feedback``: ``{name: threshold}``, keep rollouts whose numeric ``name`` (in the rollout's metadata or an
    attribute of one of its spans) is at least ``threshold``. ``agents``: train only the calls of these
    sub-agents (an unknown name is an error listing the names in the store). ``retokenize=True`` tokenizes
    every call with the model's chat template, not only those without recorded token ids.
    ``Trainer.fit`` needs no training tasks for SFT; ``val`` tasks are evaluated before and after.

    **Policies.** With ``tether.wrap(optimize={policy: [sub-agents]})`` each call trains the weights of its
    sub-agent's policy (``backend.policy(name)``, its own optimizer); calls of sub-agents no policy names (the
    frozen model's) are left out. ``policies`` names the policies to train (None: all of the agent's).

    **Packing.** With ``pack=True`` (the default) an epoch's order is shuffled rollout by rollout, each
    rollout's calls kept together in call order, and the calls of a batch that extend each other exactly (the
    next prompt's token ids begin with the previous prompt + reply ids, as a multi-turn demonstration rendered
    by one chat template does) train as one sequence (``tether.training.signal.packing``): the same loss and
    gradient as one row per call, the shared history computed once. ``pack=False``: calls shuffled one by one, one
    row each. With ``share_prefix=True`` (the default) the token ids every row of a micro-batch begins with (the
    agent's system prompt and tools) are computed once for the micro-batch (``tether.training.signal.prefix``):
    the same loss and gradient to float rounding. Each step reports ``sequences``, ``tokens_trained``,
    ``tokens_shared``, ``tokens_computed`` and ``tokens_saved``.
    """

    uses_train_tasks = False  # (it reads stored rollouts)

    source: str | None = None
    min_reward: float | None = None
    feedback: Mapping[str, float] = field(default_factory=dict)
    agents: Sequence[str] | None = None
    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 16  # calls per optimizer step
    micro_batch: int = 16  # rows per forward pass, at most
    micro_batch_tokens: int | None = None  # padded tokens per micro-batch, at most (None: no budget)
    pack: bool = True  # a rollout's calls that extend each other exactly train as one sequence
    share_prefix: bool = True  # compute a micro-batch's common prompt prefix once (tether.training.signal.prefix)
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    seed: int = 0
    retokenize: bool = False
    policies: Sequence[str] | None = None
    #: "constant", or "cosine": warm up over the first 5% of steps, then decay by cosine to a tenth of ``lr``
    schedule: str = "constant"
    _lr_scale: float = field(default=1.0, init=False, repr=False)
    _optimizer: Any = field(default=None, init=False, repr=False)
    _policy_optimizers: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.micro_batch < 1:
            raise ValueError(
                f"SFT needs epochs, batch_size and micro_batch >= 1, got {self.epochs}, {self.batch_size}, "
                f"{self.micro_batch}"
            )
        if not self.lr > 0:
            raise ValueError(f"SFT needs lr > 0, got {self.lr}")
        if isinstance(self.agents, str):
            raise TypeError(f"agents= takes a list of sub-agent names, e.g. agents=[{self.agents!r}]")
        if isinstance(self.policies, str):
            self.policies = [self.policies]
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f'SFT(schedule=...) is "constant" or "cosine", got {self.schedule!r}')

    @property
    def filter(self) -> Filter:
        agents = frozenset(self.agents) if self.agents is not None else None
        return Filter(min_reward=self.min_reward, feedback=dict(self.feedback), agents=agents)

    # -- the algorithm contract ----------------------------------------------------------------------------

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """Select, tokenize and train; returns the history and the checkpoint."""
        backend = session.backend
        if not isinstance(backend, TrainableBackend) or not isinstance(backend, RendersReplies):
            raise ValueError(
                "SFT trains a model tether holds in torch and tokenizes demonstrations with its chat template "
                f"(TrainableBackend and RendersReplies): use model='embedded' or model='hf:<path>', not the "
                f"{type(backend).__name__}"
            )
        run = session.require_run("SFT")
        policy_map = session.agent.policies
        trained = trained_policies(self.policies, policy_map)
        items = await self._read(session)
        selection = select(items, self.filter)
        examples = [e for e in selection.examples if policy_map.trains(e.agent_name) or policy_map.shared]
        if trained is not None:
            examples = [e for e in examples if policy_map.policy_of(e.agent_name) in trained]
            if not examples:
                raise ValueError(
                    f"SFT selected no call of the policies {trained}: the kept rollouts' calls are by "
                    f"{sorted(selection.agent_names) or 'no named sub-agent'}"
                )
        retokenized = await asyncio.to_thread(tokenize, examples, backend, retokenize=self.retokenize)
        history: list[dict[str, Any]] = []
        result = FitResult(run_dir=run.path)
        data = {
            "kind": "sft_data",
            "step": 0,
            "rollouts_seen": selection.rollouts_seen,
            "rollouts_kept": selection.rollouts_kept,
            "examples": len(examples),
            "imported": sum(e.imported for e in examples),
            "retokenized": retokenized,  # calls tokenized here with the model's chat template
            "tokenizer": session.backend.name or type(backend).__name__,
        }
        steps = _steps(examples)
        rows = [
            _transition(e, policy_map.policy_of(e.agent_name), n) for e, n in zip(examples, steps, strict=True)
        ]
        per_epoch = math.ceil(len(rows) / self.batch_size)
        rng = random.Random(f"{self.seed}:sft")
        step = 0

        def record(item: dict[str, Any], bar: FitProgress) -> None:
            history.append(item)
            run.log(item)
            bar.update(item)

        updates = memory.UpdateThread()  # one thread for every step: flat memory (memory.py says why)
        with (
            contextlib.closing(updates),
            FitProgress(per_epoch * self.epochs, enabled=session.settings.progress, kind="sft") as bar,
        ):
            record(data, bar)
            sampled = session.settings.eval_sampled != "never"
            carried = carried_eval(run)
            if val and carried is not None:  # a previous stage just evaluated these weights
                history.append(carried)
            elif val:
                record(await evaluate(session, val, step=0, sampled=sampled), bar)
            for epoch in range(self.epochs):
                order = _shuffled(rows, rng, by_rollout=self.pack)
                for b in range(per_epoch):
                    batch = [rows[i] for i in order[b * self.batch_size : (b + 1) * self.batch_size]]
                    started = time.perf_counter()
                    self._lr_scale = _scale(self.schedule, step, per_epoch * self.epochs)
                    metrics = await updates.run(functools.partial(self._step, backend, batch, trained))
                    step += 1
                    seconds = time.perf_counter() - started
                    record(
                        {"kind": "sft", "step": step, "epoch": epoch + 1, "examples_per_s": len(batch) / seconds}
                        | metrics,
                        bar,
                    )
            if val:
                record(await evaluate(session, val, step=step, sampled=sampled), bar)
            result.checkpoint = await updates.run(functools.partial(self._save, backend, run, step, retokenized))
        result.history = history
        return result

    async def _read(self, session: Session) -> list[Any]:
        if self.source is None:
            return await read_finished(session.store)
        store = open_store(self.source)
        try:
            return await read_finished(store)
        finally:
            await store.close()

    # -- one optimizer step --------------------------------------------------------------------------------

    def _step(
        self, backend: TrainableBackend, batch: Sequence[Transition], policies: list[str] | None
    ) -> dict[str, float]:
        if policies is not None:  # each policy's calls train its own weights
            return update_policies(self.update, backend, batch, policies, backend.pad_token_id)
        with backend.policy() as model:
            return self.update(model, batch, pad_token_id=backend.pad_token_id)

    def update(
        self,
        model: torch.nn.Module,
        batch: Sequence[Transition],
        *,
        pad_token_id: int = 0,
        weights_version: int | None = None,
        policy: str | None = None,
    ) -> dict[str, float]:
        """One optimizer step on ``batch`` (transitions with prompt and response token ids): the mean NLL of
        every response token of the batch, accumulated over micro-batches. Returns the loss (before the
        step), the gradient norm and the counts. ``policy`` picks the optimizer (None: the shared policy's);
        ``weights_version`` is accepted for the per-policy update's call and unused (demonstrations are
        off-policy by nature)."""
        del weights_version
        context = batching.context_length(model)
        optimizer = self.optimizer_for(model, policy)
        for group in optimizer.param_groups:
            group["lr"] = self.lr * self._lr_scale
        total = sum(min(len(t.response_token_ids), context - 1) for t in batch)
        sequences = packing.pack_calls(batch, context, merge=self.pack)
        sharing = batching.shares_prefix(model, self.share_prefix)  # not under checkpointing turned on elsewhere
        parts = batching.micro_batches(sequences, self.micro_batch, self.micro_batch_tokens, sharing)
        shared = prefix.shared_tokens([[sequences[i] for i in part] for part in parts]) if sharing else 0
        device = next(model.parameters()).device
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for indices in parts:
            ids, mask, _, _, _ = batching.assemble([sequences[i] for i in indices], batch, pad_token_id)
            ids, mask = ids.to(device), mask.to(device)
            logprobs = batching.token_logprobs(model, ids, 1.0, mask, share_prefix=sharing)
            loss = -(logprobs * mask).sum() / max(total, 1)
            loss.backward()
            loss_sum += float(loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm))
        optimizer.step()
        model.eval()
        return {
            "loss": loss_sum,
            "grad_norm": grad_norm if math.isfinite(grad_norm) else float("nan"),
            "trained_examples": float(len(batch)),
            "response_tokens": float(total),
            "micro_batches": float(len(parts)),
            **packing.metrics(sequences, batch, context, total, shared),
        }

    def optimizer_for(self, model: torch.nn.Module, policy: str | None = None) -> torch.optim.Optimizer:
        """The optimizer of ``model``'s trainable parameters: one per policy (None: the shared policy's)."""
        held = self._optimizer if policy is None else self._policy_optimizers.get(policy)
        if held is None:
            params = [p for p in model.parameters() if p.requires_grad]
            held = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
            if policy is None:
                self._optimizer = held
            else:
                self._policy_optimizers[policy] = held
        return held

    def _save(self, backend: TrainableBackend, run: Any, step: int, retokenized: int) -> Path:
        def write(directory: Path) -> None:
            backend.save(str(directory))
            optimizer = self._optimizer.state_dict() if self._optimizer is not None else None
            state: dict[str, Any] = {"optimizer": optimizer}
            if self._policy_optimizers:
                state["policies"] = {name: opt.state_dict() for name, opt in self._policy_optimizers.items()}
            torch.save(state, directory / "optimizer.pt")

        saved: Path = run.save_checkpoint(write, {"step": step, "algorithm": "SFT", "retokenized": retokenized})
        return saved


def _scale(schedule: str, step: int, total: int) -> float:
    """The learning rate's factor at optimizer step ``step`` (from 0) of ``total``."""
    if schedule == "constant":
        return 1.0
    warmup = max(1, total // 20)
    if step < warmup:
        return (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))


def _steps(examples: Sequence[Example]) -> list[int]:
    """Each example's place among its rollout's examples (they come in call order, rollout by rollout)."""
    seen: dict[str, int] = {}
    out = []
    for e in examples:
        out.append(seen.get(e.rollout_id, 0))
        seen[e.rollout_id] = out[-1] + 1
    return out


def _shuffled(rows: Sequence[Transition], rng: random.Random, *, by_rollout: bool) -> list[int]:
    """One epoch's order of ``rows``: shuffled call by call, or (``by_rollout``, for packing) rollout by
    rollout with each rollout's calls together in step order, so a batch holds whole runs of calls that can
    extend each other."""
    if not by_rollout:
        order = list(range(len(rows)))
        rng.shuffle(order)
        return order
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(rows):
        groups.setdefault(t.rollout_id, []).append(i)
    runs = list(groups.values())
    rng.shuffle(runs)
    return [i for run in runs for i in sorted(run, key=lambda k: rows[k].step)]


def _transition(e: Example, policy: str, step: int = 0) -> Transition:
    """An example as the row layout the update shares with GRPO (prompt + response ids); ``step`` its place in
    its rollout (what packing orders a rollout's calls by)."""
    return Transition(
        rollout_id=e.rollout_id,
        attempt_id="",
        task_id="",
        agent_name=e.agent_name,
        step=step,
        messages=e.messages,
        response=e.reply,
        prompt_token_ids=list(e.prompt_token_ids),
        response_token_ids=list(e.response_token_ids),
        logprobs=None,
        reward=0.0,
        trainable=True,
        advantage=1.0,
        policy=policy,
    )
