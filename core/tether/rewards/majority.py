"""``tether.MajorityVote``: a reward from agreement within a task's group, for tasks with a short answer.

Each rollout's answer is ``extract(output)`` (default: the output's text, trimmed and lower-cased); its reward is
the share of the group that gave the same answer (0 when no answer could be extracted: ``extract`` returned
None). It fits answers that repeat when right (a number, a label, a choice); open-ended output (a letter, a
plan) almost never repeats word for word, so every answer differs, every reward is ``1/group_size`` and nothing
trains: the batch's metrics say so (``majority/all_different``) and ``fit`` warns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from tether import _json
from tether.rewards.base import MEAN_SUFFIX, Group, GroupReward, GroupRewardError, Score, Verdict

Extract = Callable[[Any], Any]


class MajorityVote(GroupReward):
    """Reward by agreement within the group (see the module docstring). ``extract(output)`` returns the
    rollout's answer (any JSON value or hashable; None: no answer)."""

    name = "majority_vote"

    def __init__(self, extract: Extract | None = None) -> None:
        if extract is not None and not callable(extract):
            raise TypeError(f"MajorityVote(extract=...) takes a function output -> answer, got {extract!r}")
        self.extract = extract

    def __repr__(self) -> str:
        named = getattr(self.extract, "__name__", None)
        return f"MajorityVote(extract={named})" if named else "MajorityVote()"

    async def score_group(self, group: Group) -> Verdict:
        answers = [self._answer(m.output) for m in group.members]
        counts = Counter(a for a in answers if a is not None)
        n = len(answers)
        scores = []
        for answer in answers:
            if answer is None:
                scores.append(Score(0.0, "no answer extracted", {"majority.answer": None}))
                continue
            agree = counts[answer]
            shown = answer if isinstance(answer, str) else repr(answer)
            reason = f"answer {shown[:80]!r}: {agree} of {n} agree"
            scores.append(Score(agree / n, reason, {"majority.answer": shown}))
        top = max(counts.values(), default=0)
        metrics = {
            "majority/groups": float(n > 1),  # (a group of one, as in evaluation, agrees with itself)
            # every rollout gave an answer and no two agree: every reward is 1/n (a missing answer's 0 differs)
            "majority/all_different": float(n > 1 and top <= 1 and None not in answers),
            f"majority/agreement{MEAN_SUFFIX}": top / n if n else 0.0,
        }
        return Verdict(scores, metrics)

    def notes(self, metrics: Mapping[str, float]) -> list[str]:
        groups, different = metrics.get("majority/groups", 0.0), metrics.get("majority/all_different", 0.0)
        if groups and different >= groups:
            return [
                f"MajorityVote: every answer differed within each of the batch's {groups:g} groups (no two "
                "rollouts of a task agreed), so every reward is 1/group_size and nothing trains. MajorityVote "
                "fits short answers that repeat (a number, a label); check that extract= returns the answer "
                "alone, or use tether.Judge for open-ended output"
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
