"""The evaluation every algorithm shares: one pass over validation tasks greedy and, unless asked not to, one
sampled, as the history's ``eval`` record (``greedy_accuracy``, ``sampled_accuracy``, each task's reward, tool
use, failures).

``Algorithm.evaluate`` returns it by default; GRPO, SFT and a joint run log it before, during and after training.
GRPO's evaluations during a run are greedy only by default, the sampled pass only before the first step and after
the last (``Trainer(eval_sampled="ends")``; ``"every"`` samples at every evaluation). Both passes run together,
their rollouts sharing the sampler's batches, and ``progress(finished, total)`` hears as their rollouts finish
(without one, the bar of the ``FitProgress`` block it runs in shows them: ``progress.evaluation_bar``).
``carried_eval`` is the evaluation a previous stage of ``Trainer(algorithm=[...])`` ended with, which the next
stage takes as its step 0 instead of evaluating the same weights again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.training.run.progress import evaluation_bar
from tether.training.signal.batch import Job
from tether.types import Mode, PromptTemplate, Task

if TYPE_CHECKING:
    from tether.training.engine.session import Session
    from tether.training.run.run_dir import RunDir

#: the passes of an evaluation: the label of its metrics and its temperature
PASSES = (("greedy", 0.0), ("sampled", 1.0))


async def evaluate(
    session: Session,
    tasks: Sequence[Task],
    *,
    step: int = 0,
    prompts: dict[str, PromptTemplate] | None = None,
    sampled: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """One pass over ``tasks`` greedy (temperature 0) and, with ``sampled``, one at temperature 1, run together:
    accuracy (mean reward), the accuracy of each target of a ``reward=`` mapping (``greedy_accuracy/<target>``),
    the share of rollouts that called a tool, and failed rollouts of each (under ``prompts``, the latest ones
    when None). ``progress(finished, total)`` is called as rollouts finish."""
    record: dict[str, Any] = {"kind": "eval", "step": step}
    passes = PASSES if sampled else PASSES[:1]
    jobs = [Job(tasks, await session.publish({"temperature": temperature}, prompts)) for _, temperature in passes]
    bar = evaluation_bar(step, len(passes) * len(tasks)) if progress is None else None
    try:
        batches = await session.run_jobs(jobs, Mode.VAL, progress=progress or bar)
    finally:
        if bar is not None:
            bar.close()
    for (label, _), batch in zip(passes, batches, strict=True):
        record[f"{label}_accuracy"] = batch.mean_reward
        # each task's reward, in task order: the before/after table's intervals pair them over the same tasks
        record[f"{label}_rewards"] = [r.rollout.reward or 0.0 for r in batch.results]
        record[f"{label}_tools"] = [int(r.used_tools) for r in batch.results]
        record[f"{label}_tool_rate"] = batch.tool_rate
        record[f"{label}_failed"] = batch.failed
        for target, value in batch.target_rewards.items():  # a reward= mapping's targets, each on its own
            record[f"{label}_accuracy/{target}"] = value
        for key, value in batch.group_metrics.items():  # a judge's tokens: what fit's summary adds up
            if key.startswith("judge/"):
                record[key] = record.get(key, 0.0) + value
    return record


def carried_eval(run: RunDir) -> dict[str, Any] | None:
    """The evaluation the previous stage of ``Trainer(algorithm=[...])`` ended with, as this stage's step 0
    (``tether.algorithms.stages``); None when there is none."""
    carried = getattr(run, "carried_eval", None)
    return {**carried, "step": 0} if isinstance(carried, dict) else None
