"""Where a task's group meets: the runner parks each rollout of a group reward's plan here once its agent has
run, and the group is scored (``tether.rewards``) once every rollout of it has either arrived or finished
without arriving (failed for good, cancelled).

The session tells the gate which rollouts form each group (``expect``, right after it enqueues them: a group is
the rollouts of one task, resources version and batch, as GRPO compares them); the last rollout to arrive scores
the group for all of them, each group reward once. A parked rollout keeps its attempt open (the runner still
heartbeats it) and frees its runner slot, so a group larger than the runner's concurrency still meets. A group
reward that fails fails every rollout of the group, and the gate keeps the first such error (``failure``) for
the session to stop on. ``take_batch`` hands the session the metrics and notes of the groups scored since.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tether.rewards.base import Group, GroupReward, GroupRewardError, Member, Score, Verdict, merge_metrics
from tether.store.errors import StoreError

if TYPE_CHECKING:
    from tether.rewards.plan import RewardPlan
    from tether.store import Store

log = logging.getLogger(__name__)

_POLL_S = 0.05


@dataclass(slots=True)
class _Pending:
    expected: frozenset[str] | None = None
    task: object = None
    arrived: dict[str, Member] = field(default_factory=dict)
    scoring: bool = False
    #: rollout id -> {term index: score}, once scored; or the error that stopped it
    result: asyncio.Future[dict[str, dict[int, Score]]] | None = None


class GroupGate:
    """The groups of one session (see the module docstring); ``cache_dir``: the run folder (None in ``dev``)."""

    def __init__(self, plan: RewardPlan, store: Store, cache_dir: Path | None) -> None:
        self.plan = plan
        self.store = store
        self.cache_dir = cache_dir
        self.failure: GroupRewardError | None = None
        self._groups: dict[str, _Pending] = {}
        self._verdicts: list[tuple[GroupReward, Verdict]] = []

    def expect(self, key: str, rollout_ids: Sequence[str]) -> None:
        """The rollouts that form group ``key``."""
        self._groups.setdefault(key, _Pending()).expected = frozenset(rollout_ids)

    def forget(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._groups.pop(key, None)

    async def close(self) -> None:
        for part in self.plan.group_parts:
            await part.close()

    async def arrive(self, key: str, task: object, member: Member) -> dict[int, Score]:
        """Park ``member`` until its group is scored; its score from each group reward, by term index."""
        group = self._groups.setdefault(key, _Pending())
        group.task = task
        group.arrived[member.rollout_id] = member
        loop = asyncio.get_running_loop()
        if group.result is None:
            group.result = loop.create_future()
        while not group.result.done():
            if not group.scoring and await self._complete(group):
                group.scoring = True
                try:
                    if self.failure is not None:  # a group of this session failed: the step stops, none is asked
                        raise GroupRewardError(f"not scored: an earlier group failed ({self.failure})")
                    group.result.set_result(await self._score(group))
                except GroupRewardError as exc:
                    self.failure = self.failure or exc
                    group.result.set_exception(exc)
                    group.result.exception()  # (retrieved: every waiter raises it)
                except BaseException:  # cancelled while scoring: another member of the group scores it
                    group.scoring = False
                    raise
                break
            await asyncio.wait({group.result}, timeout=_POLL_S)
        scores = group.result.result()
        if member.rollout_id not in scores:
            raise GroupRewardError(f"rollout {member.rollout_id} arrived after its group was scored")
        return scores[member.rollout_id]

    async def _complete(self, group: _Pending) -> bool:
        """Whether every expected rollout has arrived or finished without arriving."""
        if group.expected is None:
            return False
        missing = [i for i in group.expected if i not in group.arrived]
        if not missing:
            return True
        try:
            rollouts = await self.store.list_rollouts(rollout_ids=missing)
        except StoreError as exc:  # asked again on the next poll
            log.warning("could not check on a group's rollouts: %s", exc)
            return False
        finished = {r.rollout_id for r in rollouts if r.status.finished}
        gone = {i for i in missing if i not in {r.rollout_id for r in rollouts}}  # harvested: finished too
        return all(i in finished or i in gone for i in missing)

    async def _score(self, group: _Pending) -> dict[str, dict[int, Score]]:
        members = tuple(sorted(group.arrived.values(), key=lambda m: m.rollout_id))
        scored = Group(group.task, members, self.cache_dir)
        out: dict[str, dict[int, Score]] = {m.rollout_id: {} for m in members}
        for part in self.plan.group_parts:
            try:
                verdict = await part.score_group(scored)
            except GroupRewardError:
                raise
            except Exception as exc:  # a bug or an unexpected failure of the reward: said as the reward's
                raise GroupRewardError(f"{part!r} failed: {type(exc).__name__}: {exc}") from exc
            if len(verdict.scores) != len(members):
                raise GroupRewardError(
                    f"{part!r} scored {len(verdict.scores)} rollouts of a group of {len(members)}"
                )
            self._verdicts.append((part, verdict))
            for index, term in enumerate(self.plan.terms):
                if term.part is part:
                    for member, score in zip(members, verdict.scores, strict=True):
                        out[member.rollout_id][index] = score
        return out

    def take_batch(self) -> tuple[dict[str, float], list[str]]:
        """The metrics (``tether.rewards.base.merge_metrics``) and notes of the groups scored since the last
        call."""
        verdicts, self._verdicts = self._verdicts, []
        notes: list[str] = []
        for part in self.plan.group_parts:
            notes.extend(part.notes(merge_metrics([v for p, v in verdicts if p is part])))
        return merge_metrics([v for _, v in verdicts]), notes
