"""How well a judge model ranks the calculator agent's answers: ``tether.Judge(model=...)`` (default
``"smollm2"``) scores groups of candidate answers, and its ranking is compared with the labels.

For each held-out problem (``data.splits``), a group of ``--group-size`` final answers in the calculator agent's
form (``"I used the calculator: 12+3 = 15. The answer is 15."``): one to ``group_size - 1`` of them right, the
others wrong in the ways the agent is wrong (the confused operation, ``data.CONFUSED``, or an off-by-one). The
judge sees the question only (never the answer) and each answer as a rollout's transcript (``tether.rewards``), and
scores the group in one request, as in training. Reported:

- **pairwise agreement**: of the (right, wrong) pairs within the groups, the share the judge scores right above
  wrong (a tie counts half; 50 % is chance), over the groups whose reply parsed;
- **top pick right**: the share of groups whose highest-scored answer is right (ties split evenly);
- **parse failures**: the groups whose reply was not valid scores (asked once: ``retries=0``; at temperature 0
  a retry asks the same question and gets the same reply).

A reply that is not valid scores (a score outside [0, 1], an id missing) fails the group, as it would in training.
The same measures are also given **leniently**: the ranking read from any reply that gives every id a number
(``"score": 7`` ranks above ``"score": 3``), what a judge prompt tuned for this model could at best recover.

Run: ``python examples/calc_autogen/judge_agreement.py --groups 30`` (``--model`` any ``model=`` string or URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

import tether  # noqa: E402
from tether.models import open_backend  # noqa: E402
from tether.models.base import ChatRequest, ChatResult, ModelBackend  # noqa: E402
from tether.rewards.base import Group, GroupRewardError, Member  # noqa: E402
from tether.testing.judge import judge_attempts  # noqa: E402

_ENTRY = re.compile(r'"id"\s*:\s*"(t\d+)"\s*,\s*"score"\s*:\s*(-?\d+(?:\.\d+)?)')


class _Recording(ModelBackend):
    """The judge's model, keeping its last request and reply (for the lenient reading)."""

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        self.request: ChatRequest | None = None
        self.reply = ""

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def chat(self, request: ChatRequest) -> ChatResult:
        result = await self.inner.chat(request)
        self.request = request
        self.reply = str(result.choices[0].message.get("content") or "") if result.choices else ""
        return result


def _lenient(recorded: _Recording, candidates: list[tuple[str, bool]]) -> list[float] | None:
    """The scores of each candidate read leniently from the last reply, None when an id has no number."""
    assert recorded.request is not None
    _, attempts = judge_attempts({"messages": recorded.request.messages})
    found = {name: float(value) for name, value in _ENTRY.findall(recorded.reply)}
    if set(found) != set(attempts):
        return None
    by_answer = {body.rsplit("final output: ", 1)[-1]: found[name] for name, body in attempts.items()}
    return [by_answer[answer] for answer, _ in candidates]


def _number(value: float) -> str:
    return f"{value:g}"


def _wrong(problem: data.Problem, rng: random.Random) -> tuple[str, str]:
    """A wrong (expression, result) of the kinds the agent makes: the confused operation, or an off-by-one."""
    if rng.random() < 0.7:
        op = data.CONFUSED[problem.op]
        wrong = data.Problem(problem.question, problem.a, problem.b, op)
        if wrong.answer != problem.answer:
            return wrong.expression, _number(wrong.answer)
    return problem.expression, _number(problem.answer + rng.choice([-1, 1]))


def candidate_group(problem: data.Problem, size: int, rng: random.Random) -> list[tuple[str, bool]]:
    """``size`` final answers to ``problem``, with whether each is right: between 1 and size-1 right."""
    n_right = rng.randint(1, size - 1)
    out: list[tuple[str, bool]] = []
    for i in range(size):
        right = i < n_right
        expression, result = (problem.expression, _number(problem.answer)) if right else _wrong(problem, rng)
        out.append((f"I used the calculator: {expression} = {result}. The answer is {result}.", right))
    rng.shuffle(out)
    return out


def agreement(scores: list[float], labels: list[bool]) -> tuple[float, int, float]:
    """(right-above-wrong pairs, ties counting half; the number of pairs; the top pick's share of being right)."""
    pairs = [
        (r, w)
        for r, lr in zip(scores, labels, strict=True)
        if lr
        for w, lw in zip(scores, labels, strict=True)
        if not lw
    ]
    won = sum(1.0 if r > w else 0.5 if r == w else 0.0 for r, w in pairs)
    best = max(scores)
    top = [label for s, label in zip(scores, labels, strict=True) if s == best]
    return won, len(pairs), sum(top) / len(top)


async def measure(model: str, groups: int, size: int, seed: int, max_tokens: int) -> dict[str, Any]:
    rng = random.Random(seed)
    problems = data.splits(seed=seed)["test"][:groups]
    recorded = _Recording(open_backend(model))
    judge = tether.Judge(recorded, retries=0, max_tokens=max_tokens)
    won = pairs = top = 0.0
    parsed = failed = 0
    lenient = {"won": 0.0, "pairs": 0.0, "top": 0.0, "parsed": 0.0}
    started = time.process_time()
    try:
        for problem in problems:
            candidates = candidate_group(problem, size, rng)
            labels = [right for _, right in candidates]
            members = tuple(Member(f"r{i}", answer) for i, (answer, _) in enumerate(candidates))
            try:
                verdict = await judge.score_group(Group({"question": problem.question}, members))
            except GroupRewardError as exc:
                failed += 1
                print(f"unparsed ({len(recorded.reply)} chars): {str(exc)[:160]}", flush=True)
                loose = _lenient(recorded, candidates)
                if loose is not None:
                    w, n, t = agreement(loose, labels)
                    lenient = {
                        "won": lenient["won"] + w,
                        "pairs": lenient["pairs"] + n,
                        "top": lenient["top"] + t,
                        "parsed": lenient["parsed"] + 1,
                    }
                continue
            scores = [s.value for s in verdict.scores]
            w, n, t = agreement(scores, labels)
            won, pairs, top, parsed = won + w, pairs + n, top + t, parsed + 1
            lenient = {
                "won": lenient["won"] + w,
                "pairs": lenient["pairs"] + n,
                "top": lenient["top"] + t,
                "parsed": lenient["parsed"] + 1,
            }
            print(f"scores {scores} labels {[int(x) for x in labels]}: {w:g}/{n} pairs", flush=True)
    finally:
        await judge.close()
    return {
        "model": model,
        "groups": groups,
        "group_size": size,
        "parsed": parsed,
        "parse_failures": failed,
        "pairwise_agreement": won / pairs if pairs else None,
        "pairs": int(pairs),
        "top_pick_right": top / parsed if parsed else None,
        "lenient_parsed": int(lenient["parsed"]),
        "lenient_pairwise_agreement": lenient["won"] / lenient["pairs"] if lenient["pairs"] else None,
        "lenient_top_pick_right": lenient["top"] / lenient["parsed"] if lenient["parsed"] else None,
        "cpu_s": round(time.process_time() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model", default="smollm2", help='the judge: "smollm2", "hf:<path>", a URL, ...')
    parser.add_argument("--groups", type=int, default=30, help="groups (one held-out problem each)")
    parser.add_argument("--group-size", type=int, default=4, help="answers per group")
    parser.add_argument("--max-tokens", type=int, default=256, help="most tokens of the judge's reply")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.model, args.groups, args.group_size, args.seed, args.max_tokens))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
