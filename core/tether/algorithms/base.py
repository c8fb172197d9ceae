"""The algorithm contract: what ``Trainer.fit`` calls.

An algorithm is any object with an async ``fit(session, train, val) -> FitResult``. It runs rollouts through
the ``tether.training.session.Session`` it is given (``run_batch``: enqueue, run, harvest, transitions built),
changes whatever it improves (the weights of ``session.backend`` when it is a ``TrainableBackend``, the prompt
templates in the store's resources, ...), records metrics in ``session.run`` and returns a ``FitResult``.
``Trainer`` knows nothing else about it, so a new algorithm is one class and no change to tether. An algorithm may
also implement ``evaluate(session, tasks)`` for its own evaluation (GRPO's greedy and T=1 accuracy), and
``prepare_backend(backend)``, which ``Trainer.fit`` calls before the backend starts (GRPO with ``lora=`` attaches
the adapters there, so a vLLM server starts with LoRA enabled).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.training.result import FitResult
from tether.types import Task

if TYPE_CHECKING:
    from tether.training.session import Session


@runtime_checkable
class Algorithm(Protocol):
    """Improves an agent on ``train`` tasks, evaluating on ``val`` (may be empty), through ``session``."""

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult: ...


def check_algorithm(algorithm: Any) -> Algorithm:
    """``algorithm`` if it implements ``Algorithm``; else a ``TypeError`` saying what it lacks."""
    fit = getattr(algorithm, "fit", None)
    if not isinstance(algorithm, Algorithm) or not inspect.iscoroutinefunction(fit):
        raise TypeError(
            f"algorithm={type(algorithm).__name__} is not an algorithm: give it a method "
            "`async def fit(self, session, train, val) -> tether.FitResult` (see tether.Algorithm), "
            "or use tether.GRPO(...) / tether.APO(...)"
        )
    return algorithm
