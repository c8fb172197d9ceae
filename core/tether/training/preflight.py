"""``fit``'s preflight: the checks ``Trainer.dev`` makes, on a few training tasks, before step 1.

A few training tasks run as one group each (the algorithm's ``group_size`` and temperature when it has them),
marked ``tether.phase = "preflight"`` and kept in the store like any rollout. Their dev report
(``tether.training.dev_report``) is then checked: a reward that raises, no reward, every rollout failed
(backend failures included), unknown ``optimize=`` names or reward targets, no LLM call captured, no
trainable transition, every reward identical. Any of these stops the run with a ``FitError`` in the report's
words and the first failing rollout's error, before anything trains; ``fit(preflight=False)`` skips it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from tether.models.base import TrainableBackend
from tether.training.dev_report import DevReport, report
from tether.training.health import FLAT_FIX, FitError, idle_reason, is_reward_error, last_line
from tether.training.session import PHASE_METADATA, Batch, Session
from tether.training.transitions import unknown_optimize_names
from tether.types import Mode, PromptTemplate, RolloutStatus, Task

#: training tasks the preflight runs (each as a group)
PREFLIGHT_TASKS = 4
_SKIP = "fit(preflight=False) skips this check"


async def run_preflight(session: Session, algorithm: Any, train: Sequence[Task]) -> DevReport:
    """Run the preflight rollouts and raise ``FitError`` on the first problem found; returns the report."""
    tasks = list(train[:PREFLIGHT_TASKS])
    if not tasks or not getattr(algorithm, "uses_train_tasks", True):
        return DevReport()
    if await _prompts_missing(session, algorithm):
        return DevReport()  # the prompt search says what it needs better than its rollouts' KeyError would
    weights = _weights_part(algorithm)
    if weights is not None and not isinstance(session.backend, TrainableBackend):
        return DevReport()  # the algorithm refuses this backend in its own words, before any rollout
    repeats = max(2, min(int(getattr(weights, "group_size", 2)), 8))
    temperature = float(getattr(weights, "temperature", 1.0))
    batch = await session.run_batch(
        tasks,
        repeats,
        {"temperature": temperature},
        Mode.TRAIN,
        prompts=_start_prompts(algorithm),
        metadata={PHASE_METADATA: "preflight"},
    )
    found = report(batch, session.agent.optimize)
    problem = _problem(session, weights, batch, found)
    if problem is not None:
        raise FitError(f"preflight ({len(batch.results)} rollouts of {len(tasks)} training tasks): {problem}")
    for note in found.problems:  # a partial problem: the run goes on, and says it
        warnings.warn(f"preflight: {note}", stacklevel=3)
    return found


def _weights_part(algorithm: Any) -> Any:
    """The part of ``algorithm`` that trains weights on transitions (GRPO; a joint run's GRPO), or None."""
    if hasattr(algorithm, "group_size"):
        return algorithm
    for part in (getattr(algorithm, "parts", None) or {}).values():
        if hasattr(part, "group_size"):
            return part
    return None


async def _prompts_missing(session: Session, algorithm: Any) -> bool:
    """Whether a prompt search that reads its starting prompts from the store finds none there."""
    parts = [algorithm, *(getattr(algorithm, "parts", None) or {}).values()]
    reads_store = any(hasattr(part, "prompts") and part.prompts is None for part in parts)
    if not reads_store or _start_prompts(algorithm) is not None:
        return False
    latest = await session.store.get_resources()
    return latest is None or not latest.prompts


def _start_prompts(algorithm: Any) -> dict[str, PromptTemplate] | None:
    """The prompt templates a prompt search starts from (its rollouts read them from resources), if given."""
    parts = [algorithm, *(getattr(algorithm, "parts", None) or {}).values()]
    for part in parts:
        prompts = getattr(part, "prompts", None)
        if isinstance(prompts, Mapping) and prompts:
            return {k: v if isinstance(v, PromptTemplate) else PromptTemplate(str(v)) for k, v in prompts.items()}
    return None


def _problem(session: Session, algorithm: Any, batch: Batch, found: DevReport) -> str | None:
    """The first problem that would make the run train nothing (or on a broken reward), in words."""
    results = batch.results
    failed = [r.rollout for r in results if r.rollout.status == RolloutStatus.FAILED]
    reward_failures = [r for r in failed if is_reward_error(r.error)]
    if reward_failures:
        first = reward_failures[0]
        return (
            f"the reward function failed on {len(reward_failures)} of {len(results)} rollouts: "
            f"{_strip_type(last_line(first.error))}\n"
            f"first failing rollout {first.rollout_id}:\n{_tail(first.error)}"
        )
    if failed and len(failed) == len(results):
        first = failed[0]
        return f"{found.problems[0]}\nfirst failing rollout {first.rollout_id}:\n{_tail(first.error)}"
    succeeded = [r for r in results if r.succeeded]
    if any(r.rollout.reward is None for r in succeeded):
        return next(p for r in found.rollouts for p in r.problems if "has no reward" in p)
    optimize = session.agent.optimize
    unknown = unknown_optimize_names(optimize, found.agent_names)
    if unknown and optimize is not None and not (optimize & found.agent_names):
        return f"{unknown}; nothing would be trained"
    targets = [p for r in succeeded for p in r.problems if "in reward=" in p]
    if targets:
        return targets[0]
    if succeeded and not any(r.transitions for r in succeeded):  # nothing reached the model through tether
        return next((p for r in succeeded for p in r.problems), "no LLM call was captured")
    rewards = {r.rollout.reward for r in succeeded}
    if len(succeeded) > 1 and len(rewards) == 1 and _trains_weights(session, algorithm):
        (value,) = rewards
        return (
            f"every reward was {value:g}: training needs rewards that differ — check that the reward scores "
            f"what the agent does; if the untrained model never succeeds, warm it up or ease the tasks; "
            f"{FLAT_FIX} ({_SKIP})"
        )
    if _trains_weights(session, algorithm) and not batch.trained:  # (the Session credited the batch)
        return f"nothing would be trained: {idle_reason(batch.results, batch.credit)} ({_SKIP})"
    return None


def _trains_weights(session: Session, weights: Any) -> bool:
    """Whether the run trains the model's weights on transitions (GRPO and its kin): a prompt search learns
    from rollouts that all score the same, a policy gradient does not."""
    return weights is not None and isinstance(session.backend, TrainableBackend)


def _tail(error: str | None, lines: int = 6) -> str:
    return "\n".join("  " + line for line in (error or "").strip().splitlines()[-lines:])


def _strip_type(line: str) -> str:
    return line.split("RewardError: ", 1)[-1]
