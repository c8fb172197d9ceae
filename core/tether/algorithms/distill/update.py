"""``tether.Distill``: on-policy distillation. The student samples (the agent runs against it through the proxy,
as in GRPO), a teacher with the same tokenizer scores the student's own tokens, and the per-token reverse KL
is the signal; no reward is needed.

Distill is GRPO's loop and update with another signal (``tether.algorithms.grpo``): sampling rounds, steps,
evaluation, checkpoints, resume, per-policy updates, LoRA, micro-batches, drift and staleness are GRPO's. It
changes three things: ``trains_on`` (every trainable call of a finished rollout, not only those with a non-zero
advantage), ``trains`` (no advantage needed) and ``token_advantages``, the per-token advantage

    A_t = log p_teacher(x_t | x_<t) - log p_student(x_t | x_<t)   (= -(reverse KL estimate at t))

on each token ``x_t`` the student sampled, ``log p_student`` being the sampling policy's logprob (the ratio's
denominator: the trainer's first pass on data the current weights sampled). The loss is GRPO's PPO-clipped
importance-weighted one with ``A_t`` in place of the rollout's advantage. On fresh data, in the first epoch,
the ratio is 1 and its gradient is ``-A_t * grad log p_student(x_t)``, summed over tokens: exactly the gradient
of the sampled reverse KL ``sum_t log p_student(x_t) - log p_teacher(x_t)`` with each token's own term (no
credit to the tokens before it, the choice of on-policy distillation as Thinking Machines and Tinker publish it),
so ``epochs=1`` is the plain reverse-KL gradient and the clipping only bounds later epochs and stale data. The
teacher's logprobs are computed on the ids and mask the update batch is built from, so they follow whatever
rows the batch holds (one call each, or a rollout's calls packed into one sequence).

Metrics per step, beside GRPO's: ``reverse_kl`` (the mean over trained tokens of ``log p_student - log
p_teacher``, before the step), ``teacher_tokens`` (tokens the teacher scored) and ``teacher_s`` (seconds it
took). torch is imported here, so this module loads only when Distill is used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from tether.algorithms.distill.teacher import Teacher, check_spec, open_teacher
from tether.algorithms.grpo.update import GRPO
from tether.models.base import ModelBackend, RefitsTokenizer
from tether.training.run.preflight import PreflightGroup
from tether.training.run.result import FitResult
from tether.types import Task, Transition

if TYPE_CHECKING:
    from tether.training.engine.session import Session
    from tether.training.signal.batch import Batch


def reverse_kl_advantages(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The per-token advantage of on-policy distillation: ``teacher - student`` logprob of each sampled token
    where ``mask > 0``, 0 elsewhere (the negative of the token's reverse-KL estimate)."""
    return torch.where(mask > 0, teacher - student, torch.zeros_like(teacher))


@dataclass
class _Signal:
    """What the teacher measured during one update: for the step's metrics."""

    kl_sum: float = 0.0
    tokens: float = 0.0
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "reverse_kl": self.kl_sum / self.tokens if self.tokens else 0.0,
            "teacher_tokens": self.tokens,
            "teacher_s": self.seconds,
        }


@dataclass
class Distill(GRPO):
    """On-policy distillation from ``teacher`` (see the module docstring and docs/distill.md).

    ``teacher``: a model that scores given token ids and shares the student's tokenizer and chat template:
    ``"embedded:<checkpoint dir>"`` (a run's checkpoint, LoRA adapter checkpoints included), ``"hf:<hub id or
    dir>"``, ``"smollm2"``, ``"vllm:<model>"`` (a vLLM server tether starts, scoring through
    ``prompt_logprobs``), or an embedded/``hf:`` backend object. An OpenAI-compatible URL is refused here (an API
    cannot score another model's tokens); a teacher whose vocabulary or chat template's token ids differ from the
    student's is refused before any rollout runs (a fresh embedded student, whose tokenizer a warm start may
    retrain, is checked when Distill starts).

    ``group_size`` rollouts of each of ``tasks_per_step`` tasks per step (no group is compared: 1 works); every
    other setting is GRPO's (``lr``, ``lora``, ``policies``, ``epochs``, ``micro_batch``, ``max_staleness``, ...).
    A reward, when the agent has one, is recorded and reported (``reward``, the evaluations' accuracy) but not
    used.
    """

    teacher: str | ModelBackend = ""
    group_size: int = 4
    tasks_per_step: int = 8
    min_group_size: ClassVar[int] = 1
    _teacher: Any = field(default=None, init=False, repr=False)
    _signal: _Signal = field(default_factory=_Signal, init=False, repr=False)

    def __post_init__(self) -> None:
        check_spec(self.teacher)
        super().__post_init__()

    # -- the algorithm contract: GRPO's, but no reward needed ---------------------------------------------

    @property
    def needs_reward(self) -> bool:
        return False

    @property
    def preflight_group(self) -> PreflightGroup | None:
        """None: preflight's flat-reward checks do not apply (the teacher's logprobs are the signal)."""
        return None

    def check_session(self, session: Session) -> None:
        """GRPO's refusals, then the teacher's: loaded now, and refused when its tokenizer differs (a ``vllm:``
        teacher, whose server starts with the run, and a fresh embedded student are checked when Distill
        starts)."""
        super().check_session(session)
        teacher = self._open()
        student = session.backend
        if getattr(teacher, "start", None) is not None:
            return
        if isinstance(student, RefitsTokenizer) and getattr(student, "base_dir", None) is None:
            return  # a fresh embedded model: a warm start before Distill may still retrain its tokenizer
        self._refuse(teacher.mismatch(student))

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """GRPO's loop with the teacher's signal; the teacher is released at the end."""
        try:
            teacher = self._open()
            start = getattr(teacher, "start", None)
            if start is not None:
                await start()
            self._refuse(await asyncio.to_thread(teacher.mismatch, session.backend))
            return await super().fit(session, train, val)
        finally:
            await self._close()

    # -- the signal ------------------------------------------------------------------------------------------

    def trains_on(self, batch: Batch) -> list[Transition]:
        """Every trainable call of the batch's finished rollouts that has response tokens: no advantage needed."""
        return [t for r in batch.results if r.succeeded for t in r.transitions if self.trains(t)]

    def trains(self, transition: Transition) -> bool:
        return bool(transition.trainable and transition.response_token_ids)

    def token_advantages(
        self, ids: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, old: torch.Tensor
    ) -> torch.Tensor:
        """``teacher - student`` logprob of each trained token (``reverse_kl_advantages``), measured."""
        del adv
        started = time.perf_counter()
        scored = self._open().score(ids, mask)
        self._signal.seconds += time.perf_counter() - started
        signal = reverse_kl_advantages(old.detach(), scored, mask)
        self._signal.kl_sum -= float((signal * mask).sum())
        self._signal.tokens += float(mask.sum())
        return signal

    def update(self, model: Any, transitions: Sequence[Transition], **options: Any) -> dict[str, float]:
        """GRPO's update (the same ``options``) with the teacher's per-token signal; its metrics plus the
        teacher's."""
        self._signal = _Signal()
        metrics = super().update(model, transitions, **options)
        return {**metrics, **self._signal.metrics()}

    # -- the teacher -----------------------------------------------------------------------------------------

    def _open(self) -> Teacher:
        if self._teacher is None:
            self._teacher = open_teacher(self.teacher)
        teacher: Teacher = self._teacher
        return teacher

    async def _close(self) -> None:
        teacher, self._teacher = self._teacher, None
        if teacher is None:
            return
        aclose = getattr(teacher, "aclose", None)
        if aclose is not None:
            await aclose()
        teacher.close()

    def _refuse(self, why: str | None) -> None:
        if why is not None:
            raise ValueError(
                f"Distill cannot use this teacher: {why}. The teacher scores the student's own token ids, so it "
                "needs the student's tokenizer and chat template: distill from a checkpoint of the same model "
                "(e.g. a run's checkpoint folder of this student), or warm the student up from the teacher "
                "with tether.WarmStart instead"
            )
