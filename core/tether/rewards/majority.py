"""``tether.MajorityVote``: a reward from agreement within a task's group, for tasks with a short answer.

Each rollout's answer is ``extract(output)`` (default: the output's text, trimmed and lower-cased); its reward is
the share of the group that gave the same answer (``mode="share"``), or 1 when its answer is the group's most
common one and 0 otherwise (``mode="majority"``, test-time RL's reward); 0 when no answer could be extracted
(``extract`` returned None: it never counts as a vote). ``min_share`` skips the groups whose most common answer
is given by less than that share of the group (a low-confidence vote, often wrong): every rollout of such a
group scores 0, so the group gives no advantage. It fits answers that repeat when right (a number, a label, a
choice); open-ended output (a letter, a plan) almost never repeats word for word, so every answer differs, every
reward is ``1/group_size`` and nothing trains: the batch's metrics say so (``majority/all_different``) and ``fit``
warns. Skipped groups are counted in ``majority/skipped``.

A model can agree with itself without reading the task at all, by giving one answer to every task; the share of
its group giving that answer is then high and the plain vote rewards the collapse. So the object keeps the answers
of the last ``history`` groups it scored, and reports in ``majority/common_share`` how many of the recent rollouts
of *other* tasks gave their single commonest answer (``notes`` warns from one half). With ``contrast=True`` (off by
default: agreement beyond chance) an answer's reward is its share in its group minus its share among those
rollouts (its background), floored at 0: a constant answer earns about 0, an answer given consistently to this
task alone earns its share. The history is this object's, in the trainer's process (group rewards are scored
there; concurrent groups update it one at a time); its first groups have no history and score the plain share.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal

from tether import _json
from tether.rewards.base import MEAN_SUFFIX, Group, GroupReward, GroupRewardError, Score, Verdict

Extract = Callable[[Any], Any]
Mode = Literal["share", "majority"]
_MODES = ("share", "majority")
_COMMON_NOTE = 0.5  # a batch's mean majority/common_share from which notes() says the model answers alike


class MajorityVote(GroupReward):
    """Reward by agreement within the group (see the module docstring). ``extract(output)`` returns the
    rollout's answer (any JSON value or hashable; None: no answer); ``mode`` is ``"share"`` (the share of the
    group agreeing) or ``"majority"`` (1 for the most common answer, else 0); ``min_share`` in [0, 1] skips the
    groups whose most common answer has a smaller share (all their rollouts score 0). ``contrast``: subtract
    each answer's share among the recent rollouts of other tasks (the last ``history`` groups), floored at 0, so
    that one answer given to every task earns nothing; False (the default): the plain vote, which still watches
    that history for one answer given to every task (``majority/common_share``) and warns."""

    name = "majority_vote"

    def __init__(
        self,
        extract: Extract | None = None,
        *,
        mode: Mode = "share",
        min_share: float = 0.0,
        contrast: bool = False,
        history: int = 32,
    ) -> None:
        if extract is not None and not callable(extract):
            raise TypeError(f"MajorityVote(extract=...) takes a function output -> answer, got {extract!r}")
        if mode not in _MODES:
            raise ValueError(f"MajorityVote(mode={mode!r}): use 'share' (the share agreeing) or 'majority' (1/0)")
        if isinstance(min_share, bool) or not isinstance(min_share, int | float) or not 0.0 <= min_share <= 1.0:
            raise ValueError(f"MajorityVote(min_share={min_share!r}): give a share in [0, 1], e.g. 0.5")
        if not isinstance(contrast, bool):
            raise TypeError(
                f"MajorityVote(contrast={contrast!r}): give True (agreement beyond other tasks' answers) or False"
            )
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"MajorityVote(history={history!r}): give the number of recent groups kept, e.g. 32")
        self.extract = extract
        self.mode: Mode = mode
        self.min_share = float(min_share)
        self.contrast = contrast
        self.history = history
        # the answers of the last `history` groups scored: (the task's key, its answers' counts, its rollouts)
        self._recent: deque[tuple[str, Counter[Hashable], int]] = deque(maxlen=history)

    def __repr__(self) -> str:
        named = getattr(self.extract, "__name__", None)
        parts = [f"extract={named}"] if named else []
        parts += [f"mode={self.mode!r}"] * (self.mode != "share")
        parts += [f"min_share={self.min_share:g}"] * (self.min_share > 0)
        parts += ["contrast=True"] * self.contrast
        parts += [f"history={self.history}"] * (self.history != 32)
        return f"MajorityVote({', '.join(parts)})"

    async def score_group(self, group: Group) -> Verdict:
        answers = [self._answer(m.output) for m in group.members]
        counts = Counter(a for a in answers if a is not None)
        n = len(answers)
        top = max(counts.values(), default=0)
        skipped = n > 0 and top / n < self.min_share
        # (no await from here on: concurrent groups read and update the history one at a time)
        key = _task_key(group.task)
        background, others = self._background(key)
        scores = []
        chance = 0.0
        for answer in answers:
            if answer is None:
                scores.append(Score(0.0, "no answer extracted", {"majority.answer": None}))
                continue
            agree = counts[answer]
            shown = answer if isinstance(answer, str) else repr(answer)
            reason = f"answer {shown[:80]!r}: {agree} of {n} agree"
            if self.mode == "majority":
                value = float(agree == top)
                reason += " (the most common answer)" if agree == top else f" (the most common: {top} of {n})"
            else:
                value = agree / n
            details: dict[str, Any] = {"majority.answer": shown}
            if self.contrast and others:
                base = background[answer] / others
                chance += base
                details["majority.background"] = base
                reason += f"; {base:.0%} of {others} recent rollouts of other tasks too: {value:.2f} - {base:.2f}"
                value = max(0.0, value - base)
            if skipped:
                value, reason = 0.0, f"{reason}; no answer reaches min_share {self.min_share:g}: group skipped"
            scores.append(Score(value, reason, details))
        if n:
            self._recent.append((key, counts, n))
        voted = n - answers.count(None)
        metrics = {
            "majority/groups": float(n > 1),  # (a group of one, as in evaluation, agrees with itself)
            # every rollout gave an answer and no two agree: every reward is 1/n (a missing answer's 0 differs)
            "majority/all_different": float(n > 1 and top <= 1 and None not in answers),
            f"majority/agreement{MEAN_SUFFIX}": top / n if n else 0.0,
            "majority/skipped": float(skipped and n > 1),  # groups below min_share: no advantage
        }
        if others:
            # the share of recent other tasks' rollouts giving their commonest answer: near 1, one answer for all
            common = max(background.values(), default=0) / others
            metrics[f"majority/common_share{MEAN_SUFFIX}"] = common
        if self.contrast:
            # the mean background subtracted from this group's answers (how much of its agreement is chance)
            metrics[f"majority/background{MEAN_SUFFIX}"] = chance / voted if voted else 0.0
        return Verdict(scores, metrics)

    def _background(self, key: str) -> tuple[Counter[Hashable], int]:
        """The answers of the recent groups of tasks other than ``key``'s, and how many rollouts gave them."""
        background: Counter[Hashable] = Counter()
        others = 0
        for task, counts, n in self._recent:
            if task != key:
                background.update(counts)
                others += n
        return background, others

    def notes(self, metrics: Mapping[str, float]) -> list[str]:
        groups, different = metrics.get("majority/groups", 0.0), metrics.get("majority/all_different", 0.0)
        common = metrics.get("majority/common_share", 0.0)
        if common >= _COMMON_NOTE:
            said = (
                f"MajorityVote: {common:.0%} of the recent rollouts of other tasks gave one and the same answer "
                "(majority/common_share): the model answers alike whatever the task. "
            )
            if self.contrast:
                return [
                    said + "contrast=True scores that answer about 0; if it is right for most tasks (a label set "
                    "of few values), use contrast=False"
                ]
            return [
                said + "The plain vote rewards that: unless one answer is right for most tasks (a label set of "
                "few values), use MajorityVote(contrast=True), which scores an answer given to every task about 0"
            ]
        if groups and different >= groups:
            return [
                f"MajorityVote: every answer differed within each of the batch's {groups:g} groups (no two "
                "rollouts of a task agreed), so every reward of a group is the same and nothing trains. "
                "MajorityVote fits short answers that repeat (a number, a label); check that extract= returns "
                "the answer alone, or use tether.Judge for open-ended output"
            ]
        return []

    def _answer(self, output: Any) -> Hashable | None:
        try:
            answer = self.extract(output) if self.extract is not None else _default(output)
        except Exception as exc:
            raise GroupRewardError(f"{self}: extract(output) raised {type(exc).__name__}: {exc}") from exc
        if answer is None or isinstance(answer, Hashable):
            return answer
        try:  # a list or dict: compared by its JSON
            return _json.dumps(_json.jsonable(answer)).decode()
        except TypeError:
            return repr(answer)


def _default(output: Any) -> str | None:
    text = output if isinstance(output, str) else _json.dumps(_json.jsonable(output)).decode()
    text = " ".join(text.split()).lower()
    return text or None


def _task_key(task: Any) -> str:
    """A task's identity in the history: its JSON (``jsonable`` gives anything a JSON form)."""
    return _json.dumps(_json.jsonable(task)).decode()
