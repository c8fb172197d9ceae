"""What ``Trainer.dev`` returns: each rollout with its spans and transitions, printable as a readable trace
(agent → LLM call → tool → result → reward; each call with its policy, whether it trains and its advantage
under the trainer's credit rule), and the problems found in the wiring."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether import spans
from tether.spans import is_proxy_llm_span
from tether.training.signal.transitions import NameCheck, check_optimize_names
from tether.types import Rollout, RolloutStatus, Span, SpanKind, Transition

if TYPE_CHECKING:
    from tether.training.signal.batch import Batch

_CLIP = 80


@dataclass(slots=True)
class DevRollout:
    rollout: Rollout
    spans: list[Span]
    transitions: list[Transition]
    problems: list[str] = field(default_factory=list)
    attempts: int = 1

    @property
    def status(self) -> RolloutStatus:
        return self.rollout.status

    @property
    def output(self) -> Any:
        return self.rollout.output

    @property
    def reward(self) -> float | None:
        return self.rollout.reward

    @property
    def error(self) -> str | None:
        return self.rollout.error

    def __str__(self) -> str:
        r = self.rollout
        reward = "-" if r.reward is None else f"{r.reward:g}"
        lines = [f"rollout {r.rollout_id} [{r.status.value}] reward={reward} task={_clip(r.input)}"]
        calls = _transitions_by_span(self.spans, self.transitions)
        for span in self.spans:
            call = calls.get(id(span))
            lines.append("  " + _describe(span) + (_credit(call) if call is not None else ""))
        if r.status == RolloutStatus.SUCCEEDED:
            lines.append(f"  output: {_clip(r.output)}")
        elif r.error:
            lines.append(f"  error: {r.error.strip().splitlines()[-1]}")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return "\n".join(lines)


@dataclass(slots=True)
class DevReport:
    rollouts: list[DevRollout] = field(default_factory=list)
    agent_names: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    #: what the credit rule could not do with these rollouts (``tether.training.signal.credit``)
    notes: list[str] = field(default_factory=list)
    #: the mean final reward of each target of a ``reward=`` mapping (``Batch.target_rewards``)
    target_rewards: dict[str, float] = field(default_factory=dict)
    #: the ``optimize=`` names no rollout's call carried (None: all were seen), its ``unknown`` in ``problems``
    optimize_check: NameCheck | None = None

    def __iter__(self) -> Any:
        return iter(self.rollouts)

    def __len__(self) -> int:
        return len(self.rollouts)

    def __getitem__(self, index: int) -> DevRollout:
        return self.rollouts[index]

    @property
    def all_problems(self) -> list[str]:
        return self.problems + [p for r in self.rollouts for p in r.problems]

    def metrics(self) -> dict[str, float]:
        """Counts — ``rollouts`` run, how many ``succeeded`` and ``failed`` — and rates: ``success_rate`` (the
        share that succeeded), the mean reward of those with a reward (NaN when none has one: see ``problems``
        for why), that of each target of a ``reward=`` mapping (``mean_reward/<target>``), and LLM calls per
        rollout. Every value is a float."""
        n = len(self.rollouts) or 1
        rewards = [r.reward for r in self.rollouts if r.reward is not None]
        succeeded = sum(r.status == RolloutStatus.SUCCEEDED for r in self.rollouts)
        return {
            "rollouts": float(len(self.rollouts)),
            "succeeded": float(succeeded),
            "failed": float(sum(r.status == RolloutStatus.FAILED for r in self.rollouts)),
            "success_rate": succeeded / n,
            "mean_reward": sum(rewards) / len(rewards) if rewards else math.nan,
            "llm_calls_per_rollout": sum(len(r.transitions) for r in self.rollouts) / n,
            **{f"mean_reward/{target}": value for target, value in self.target_rewards.items()},
        }

    def __str__(self) -> str:
        parts = [str(r) for r in self.rollouts]
        parts.extend(f"problem: {p}" for p in self.problems)
        parts.extend(f"note: {n}" for n in self.notes)
        return "\n".join(parts)


def report(batch: Batch, optimize: frozenset[str] | None) -> DevReport:
    """The report of a ``dev`` batch: each rollout's problems (a failed rollout's first: why it failed), a
    missing reward, how many rollouts failed and why, and unknown ``optimize=`` names."""
    out = DevReport(target_rewards=batch.target_rewards)
    failures: Counter[str] = Counter()
    for result in batch.results:
        problems = list(result.problems)
        if result.rollout.status == RolloutStatus.FAILED:
            why = _last_line(result.rollout.error)
            failures[why] += 1
            problems.insert(0, f"rollout {result.rollout.rollout_id} failed: {why}")
        if result.succeeded and result.rollout.reward is None and not any("in reward=" in p for p in problems):
            problems.append(
                f"rollout {result.rollout.rollout_id} has no reward: pass reward= to tether.wrap or call "
                "tether.emit_reward in the agent"
            )
        out.rollouts.append(
            DevRollout(result.rollout, result.spans, result.transitions, problems, attempts=result.attempts)
        )
        out.agent_names |= result.agent_names
    if failures:
        reasons = "; ".join(f"{why} (x{count})" if count > 1 else why for why, count in failures.most_common())
        n = sum(failures.values())
        out.problems.append(f"{n} of {len(batch.results)} rollouts failed: {reasons}")
    out.optimize_check = check_optimize_names(optimize, out.agent_names, len(batch.results))
    if out.optimize_check is not None:
        out.problems.append(out.optimize_check.unknown)
    return out


def all_zero(found: DevReport) -> str | None:
    """What it means for ``fit`` that every finished rollout scored 0 (None when some did not)."""
    rewards = [r.reward for r in found.rollouts if r.status == RolloutStatus.SUCCEEDED and r.reward is not None]
    if not rewards or any(reward != 0 for reward in rewards):
        return None
    return (
        f"every reward was 0 ({len(rewards)} rollout{'s' if len(rewards) > 1 else ''}): fit would learn nothing "
        "from rollouts like these (GRPO needs rewards that differ within a task's group; its preflight stops on "
        "them). Check that the reward scores what the agent does (its trace above); if this model never succeeds, "
        "warm it up from a stronger model first (tether.WarmStart) or ease the tasks"
    )


def _transitions_by_span(spans_: list[Span], transitions: list[Transition]) -> dict[int, Transition]:
    """Each proxy LLM span's transition (both in sequence order), keyed by the span's id()."""
    ordered = sorted(spans_, key=lambda s: s.sequence if s.sequence is not None else 0)
    calls = [s for s in ordered if is_proxy_llm_span(s)]
    return {id(span): t for span, t in zip(calls, transitions, strict=False)}


def _credit(t: Transition) -> str:
    """`` · policy=writer trains adv=+0.71``: who serves the call, whether it trains, its advantage."""
    trains = "trains" if t.trainable else "not trained"
    adv = "-" if t.advantage is None else f"{t.advantage:+.2f}"
    return f"  · policy={t.policy or '-'} {trains} adv={adv}"


def _describe(span: Span) -> str:
    agent = f"{printable(span.agent_name)} → " if span.agent_name else ""
    attrs = span.attributes
    call = spans.proxy_call(span)
    if call is not None:
        message, calls = call.message, call.tool_calls
        if calls:
            said = ", ".join(
                f"{c.get('function', {}).get('name')}({_clip(c.get('function', {}).get('arguments'), 40)})"
                for c in calls
            )
            said = f"calls {said}"
        else:
            said = _clip(message.get("content"))
        ids = len(call.response_token_ids or [])
        return f"{agent}LLM: {said}" + (f"  [{ids} token ids]" if ids else "")
    if span.kind == SpanKind.LLM and span.name == spans.PASSTHROUGH_CALL:
        answer = attrs.get("response") or {}
        choices = answer.get("choices") if isinstance(answer, dict) else None
        content = (choices[0].get("message") or {}).get("content") if choices else None
        return f"{agent}LLM (passthrough to {attrs.get('url')}, not trained): {_clip(content)}"
    if span.kind == SpanKind.LLM and span.name == spans.LLM_CALL_FAILED:
        return f"{agent}LLM error: {_clip(attrs.get(spans.ERROR), 120)}"
    if span.kind == SpanKind.TOOL:
        outcome = (
            f"error {_clip(attrs.get(spans.TOOL_ERROR))}"
            if attrs.get(spans.TOOL_ERROR) is not None
            else _clip(attrs.get(spans.TOOL_RESULT))
        )
        args = _clip(attrs.get(spans.TOOL_ARGUMENTS), 40)
        return f"{agent}tool {attrs.get(spans.TOOL_NAME, span.name)}({args}) → {outcome}"
    if span.kind == SpanKind.REWARD and spans.REWARD_REASON in attrs:  # a group reward's (tether.Judge)
        part_of = attrs.get(spans.REWARD_PART_OF)
        whose = f" for {part_of}" if part_of else ""
        weight = f" x{attrs[spans.REWARD_WEIGHT]:g}" if spans.REWARD_WEIGHT in attrs else ""
        value = attrs.get(spans.REWARD_VALUE)
        shown = f"{value:.2f}" if isinstance(value, float) else repr(value)
        cached = " (cached)" if attrs.get("judge.cached") else ""
        return f"{span.name} {shown}{weight}{whose}{cached}: {_clip(attrs[spans.REWARD_REASON], 120)}"
    if span.kind == SpanKind.REWARD:
        target = attrs.get(spans.REWARD_TARGET)
        whose = f" for {target}" if target else ""
        final = " (final)" if attrs.get(spans.REWARD_FINAL) else ""
        return f"{agent}reward {attrs.get(spans.REWARD_VALUE)}{whose}{final}"
    return f"{agent}{span.kind.value} {span.name}"


def printable(name: str) -> str:
    """A name as a trace prints it: itself when printable, else its repr (a CrewAI role ending in a newline
    would break the trace's lines)."""
    return name if name.isprintable() else repr(name)


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "unknown error"


def _clip(value: Any, width: int = _CLIP) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"
