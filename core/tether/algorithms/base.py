"""The algorithm contract: what ``Trainer.fit`` calls, with a real default for every part but ``fit``.

An algorithm subclasses ``Algorithm`` and writes one method, ``async fit(session, train, val) -> FitResult``: it
runs rollouts through the ``tether.training.engine.session.Session`` it is given (``run_batch``: enqueue, run, read
back, transitions built and credited), changes whatever it improves (the weights of ``session.backend`` when it
is a ``TrainableBackend``, the prompt templates in the store's resources, ...), records metrics in
``session.run`` and returns a ``FitResult``. ``Trainer`` calls the rest of the contract directly, in this order,
and each has a default that does nothing or the common thing:

1. ``check_agent(agent)``: refuse the wrapped agent before the run folder exists (a joint run's policy names).
2. ``uses_train_tasks``: whether ``fit`` needs training tasks (SFT reads stored rollouts: False).
3. ``uses_session``: whether the Trainer opens the session's store, backend, proxy and runner (verl runs
   everything in its own workers: False, and ``fit`` gets a session with settings, agent and run folder only).
4. ``prepare_backend(backend)``: before the backend starts (GRPO with ``lora=`` attaches adapters, so a vLLM
   server starts with LoRA enabled).
5. ``check_session(session)``: what ``fit`` would refuse, said before the preflight rollouts.
6. ``probe(session)``: in the preflight, before its rollouts, check once what the algorithm needs besides the
   student (WarmStart: a teacher that answers a call within its deadline); a ``FitError`` naming it otherwise.
7. ``preflight_group``: how preflight samples its groups of rollouts (GRPO's group size and temperature), or
   None for an algorithm that does not train weights on transitions.
8. ``fit``; ``evaluate(session, tasks)`` is its evaluation (greedy and T=1 accuracy by default).

``scale_by_std`` is part of the credit rule every rollout records (whether advantages are divided by their
group's standard deviation); ``continues_on_resume`` says whether a finished stage of ``Trainer(algorithm=[...])``
continues when its run resumes; ``needs_reward`` whether it learns from rewards (preflight refuses rollouts
without one; ``tether.Distill`` learns from a teacher's logprobs instead).

An object that is no subclass but has ``async def fit`` still trains (``check_algorithm`` wraps it with these
defaults); one that also defines another part of the contract is refused naming that part, since only a
subclass's would be called.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tether.training.run.preflight import PreflightGroup
from tether.training.run.result import FitResult
from tether.types import Task

if TYPE_CHECKING:
    from tether.models.base import ModelBackend
    from tether.plugin.wrap import WrappedAgent
    from tether.training.engine.session import Session

#: the parts of the contract besides ``fit`` (``Trainer`` calls them only on ``Algorithm`` subclasses)
CONTRACT = (
    "check_agent",
    "uses_train_tasks",
    "uses_session",
    "prepare_backend",
    "check_session",
    "probe",
    "preflight_group",
    "given_prompts",
    "reads_store_prompts",
    "scale_by_std",
    "continues_on_resume",
    "needs_reward",
)


class SupportsFit(Protocol):
    """Anything ``Trainer(algorithm=...)`` takes as one algorithm: an ``Algorithm`` or an object with its
    ``fit``."""

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult: ...


class Algorithm(abc.ABC):
    """Improves an agent on ``train`` tasks, evaluating on ``val`` (may be empty), through ``session``.

    Subclass it and write ``fit``; override the other parts (see the module docstring) where the defaults do
    not fit.
    """

    @abc.abstractmethod
    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        """Train, and return the history and the last checkpoint."""

    # -- optional parts, with their defaults ---------------------------------------------------------------

    @property
    def uses_train_tasks(self) -> bool:
        """Whether ``fit`` needs training tasks (``Trainer.fit`` refuses an empty ``train`` when it does)."""
        return True

    @property
    def uses_session(self) -> bool:
        """Whether ``fit`` runs rollouts through the session (the Trainer then opens its store, backend, proxy
        and runner); False: the session holds the agent, settings and run folder only, and nothing starts."""
        return True

    @property
    def scale_by_std(self) -> bool:
        """Whether advantages are divided by their group's standard deviation (recorded with every rollout)."""
        return True

    @property
    def needs_reward(self) -> bool:
        """Whether ``fit`` learns from rewards: preflight then refuses rollouts that have none. False for an
        algorithm whose signal is elsewhere (``tether.Distill``: a teacher's logprobs; rewards are still
        recorded)."""
        return True

    @property
    def continues_on_resume(self) -> bool:
        """Whether a finished stage of ``Trainer(algorithm=[...])`` runs again when its run resumes (GRPO given
        more steps continues; a warm start is not redone)."""
        return True

    @property
    def preflight_group(self) -> PreflightGroup | None:
        """How preflight samples each task's rollouts when this algorithm trains weights on transitions (its
        flat-reward checks apply then); None: it does not, and preflight samples pairs at temperature 1."""
        return None

    def check_agent(self, agent: WrappedAgent) -> None:
        """Refuse ``agent`` (``ValueError`` naming the fix) before the run folder or anything else exists."""
        del agent

    def prepare_backend(self, backend: ModelBackend) -> None:
        """Set the backend up before it starts (attach LoRA adapters, ...)."""
        del backend

    def check_session(self, session: Session) -> None:
        """Refuse what ``fit`` would refuse (a backend it cannot train, ...), before any rollout runs."""
        del session

    async def probe(self, session: Session) -> None:
        """In the preflight, before its rollouts: check what ``fit`` needs besides the student (a teacher that
        answers), raising ``tether.FitError`` naming it; nothing by default."""
        del session

    def given_prompts(self) -> dict[str, Any] | None:
        """The prompt templates this algorithm starts its rollouts from, when it gives them (a prompt search's
        ``prompts=``); None: the store's latest."""
        return None

    def reads_store_prompts(self) -> bool:
        """Whether ``fit`` starts from prompt templates it reads from the store (then preflight, which could not
        render them, leaves the check to ``fit``)."""
        return False

    async def evaluate(self, session: Session, tasks: Sequence[Task]) -> dict[str, Any]:
        """Accuracy (mean reward) on ``tasks`` greedy and at temperature 1 (``tether.algorithms.evaluation``)."""
        from tether.algorithms.evaluation import evaluate

        return await evaluate(session, tasks)


class _FitOnly(Algorithm):
    """An object with ``async def fit`` and nothing else of the contract, with the defaults for the rest."""

    def __init__(self, wrapped: SupportsFit) -> None:
        self.wrapped = wrapped

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        return await self.wrapped.fit(session, train, val)


def name_of(algorithm: Algorithm) -> str:
    """What the run's config and a stage's label call ``algorithm``: its class's name (the wrapped object's, for
    an object with only ``fit``)."""
    return type(algorithm.wrapped if isinstance(algorithm, _FitOnly) else algorithm).__name__


def check_algorithm(algorithm: Any) -> Algorithm:
    """``algorithm`` as an ``Algorithm``: itself when it subclasses one, an object with ``async def fit`` with
    the defaults for the rest; else a ``TypeError`` saying what it lacks."""
    fit = getattr(algorithm, "fit", None)  # (only to say what is missing: the Trainer calls it directly)
    if not inspect.iscoroutinefunction(fit):
        raise TypeError(
            f"algorithm={type(algorithm).__name__} is not an algorithm: give it a method "
            "`async def fit(self, session, train, val) -> tether.FitResult` (subclass tether.Algorithm), "
            "or use tether.GRPO(...) / tether.APO(...)"
        )
    if isinstance(algorithm, Algorithm):
        return algorithm
    defined = [name for name in CONTRACT if hasattr(algorithm, name)]
    if defined:
        listed = ", ".join(defined)
        raise TypeError(
            f"algorithm={type(algorithm).__name__} defines {listed}, part of the algorithm contract that the "
            f"Trainer calls only on a subclass of tether.Algorithm: declare it as "
            f"`class {type(algorithm).__name__}(tether.Algorithm)` (its other methods keep their defaults)"
        )
    return _FitOnly(algorithm)
