"""``fit``'s preflight: the checks ``Trainer.dev`` makes, on a few training tasks, before step 1.

First the algorithm probes what it needs besides the student (``Algorithm.probe``: a warm start's teacher
answers one call within ``WarmStart(teacher_timeout_s=)``). Then a few training tasks run as one group each (the
algorithm's ``preflight_group``: GRPO's group size and temperature), marked ``tether.phase = "preflight"`` and
kept in the store like any rollout. Their dev report (``tether.training.run.dev_report``) is then checked: a reward
that raises, no reward (when the algorithm learns from one: ``needs_reward``), every rollout failed (backend
failures included), unknown ``optimize=`` names or reward targets, no LLM call captured, no trainable
transition, every reward identical. Any of these stops the run with a ``FitError`` in the report's words and the
first failing rollout's error, before anything trains; ``fit(preflight=False)`` skips it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tether.models.base import TrainableBackend
from tether.training.engine.session import PHASE_METADATA, Session
from tether.training.run.dev_report import DevReport, report
from tether.training.run.health import FLAT_FIX, FitError, idle_reason, is_reward_error, last_line
from tether.training.signal.batch import Batch
from tether.types import Mode, RolloutStatus, Task

if TYPE_CHECKING:
    from tether.plugin.wrap import WrappedAgent

#: training tasks the preflight runs (each as a group)
PREFLIGHT_TASKS = 4
_SKIP = "fit(preflight=False) skips this check"
_NO_REWARD = "has no reward"  # (the dev report's words for a rollout without one)


@dataclass(frozen=True, slots=True)
class PreflightGroup:
    """How preflight samples: ``size`` rollouts of each task at ``temperature`` (the training batches')."""

    size: int = 2
    temperature: float = 1.0


class Preflighted(Protocol):
    """What preflight reads of the algorithm (``tether.algorithms.base.Algorithm`` has each, with defaults)."""

    @property
    def uses_train_tasks(self) -> bool: ...

    @property
    def preflight_group(self) -> PreflightGroup | None: ...

    @property
    def needs_reward(self) -> bool: ...

    def given_prompts(self) -> dict[str, Any] | None: ...

    def reads_store_prompts(self) -> bool: ...

    async def probe(self, session: Session) -> None: ...


async def run_preflight(session: Session, algorithm: Preflighted, train: Sequence[Task]) -> DevReport:
    """Probe what the algorithm needs besides the student (``Algorithm.probe``: a warm start's teacher), run the
    preflight rollouts, and raise ``FitError`` on the first problem found; returns the report."""
    await algorithm.probe(session)
    tasks = list(train[:PREFLIGHT_TASKS])
    if not tasks or not algorithm.uses_train_tasks:
        return DevReport()
    prompts = algorithm.given_prompts()
    if prompts is None and algorithm.reads_store_prompts():
        latest = await session.store.get_resources()
        if latest is None or not latest.prompts:
            return DevReport()  # the prompt search says what it needs better than its rollouts' KeyError would
    group = algorithm.preflight_group
    if group is not None and not isinstance(session.backend, TrainableBackend):
        return DevReport()  # the algorithm refuses this backend in its own words, before any rollout
    batch = await session.run_batch(
        tasks,
        max(2, min(group.size, 8)) if group is not None else 2,
        {"temperature": group.temperature if group is not None else 1.0},
        Mode.TRAIN,
        prompts=prompts,
        metadata={PHASE_METADATA: "preflight"},
    )
    found = report(batch, session.agent.optimize)
    problem = _problem(session, group is not None, batch, found, algorithm.needs_reward)
    if problem is not None:
        raise FitError(f"preflight ({len(batch.results)} rollouts of {len(tasks)} training tasks): {problem}")
    session.names_checked = True  # (the run's one optimize= check: the first training batch's is not needed)
    check = found.optimize_check
    for note in found.problems:  # a partial problem: the run goes on, and says it
        if not algorithm.needs_reward and _NO_REWARD in note:
            continue
        if check is not None and note == check.unknown:
            note = check.sampled  # a sample of the run's rollouts: a missing name may be on a path not taken
        # (attributed to tether, not to the asyncio frame that happens to run the preflight)
        warnings.warn_explicit(f"preflight: {note}", UserWarning, "tether.fit", 0)
    return found


async def check_group_rewards(agent: WrappedAgent) -> None:
    """``fit``'s check, before any rollout, that every group reward in ``reward=`` can score (a judge's server
    answers at its URL): ``FitError`` naming each one that cannot, and the fix."""
    problems = await agent.reward_problems()
    if problems:
        raise FitError("preflight: " + "; ".join(problems))


def _problem(
    session: Session, weights: bool, batch: Batch, found: DevReport, needs_reward: bool = True
) -> str | None:
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
    targets = [p for r in succeeded for p in r.problems if "in reward=" in p]  # (such a reward may be None)
    if needs_reward and any(r.rollout.reward is None for r in succeeded) and not targets:
        return next(p for r in found.rollouts for p in r.problems if _NO_REWARD in p)
    check = found.optimize_check
    if check is not None and check.nothing_trained:
        return f"{check.unknown}; nothing would be trained"
    if targets:
        return targets[0]
    if succeeded and not any(r.transitions for r in succeeded):  # nothing reached the model through tether
        return next((p for r in succeeded for p in r.problems), "no LLM call was captured")
    rewards = {r.rollout.reward for r in succeeded}
    if len(succeeded) > 1 and len(rewards) == 1 and _trains_weights(session, weights):
        (value,) = rewards
        return (
            f"every reward was {value:g}: training needs rewards that differ — check that the reward scores "
            f"what the agent does; if the untrained model never succeeds, warm it up or ease the tasks; "
            f"{FLAT_FIX} ({_SKIP})"
        )
    if _trains_weights(session, weights) and not batch.trained:  # (the Session credited the batch)
        return f"nothing would be trained: {idle_reason(batch.results, batch.credit)} ({_SKIP})"
    return None


def _trains_weights(session: Session, weights: bool) -> bool:
    """Whether the run trains the model's weights on transitions (GRPO and its kin: an algorithm with a
    ``preflight_group``): a prompt search learns from rollouts that all score the same, a policy gradient does
    not."""
    return weights and isinstance(session.backend, TrainableBackend)


def _tail(error: str | None, lines: int = 6) -> str:
    return "\n".join("  " + line for line in (error or "").strip().splitlines()[-lines:])


def _strip_type(line: str) -> str:
    return line.split("RewardError: ", 1)[-1]
