"""What ``Trainer.fit`` returns: the run folder, the metrics history, the last checkpoint and curve.

Every algorithm returns a ``FitResult`` (or a subclass with more, such as ``APOResult``). ``summary`` is the
before/after table the examples print — with the held-out sample size, 95 % intervals for each accuracy and
for the gain (paired over the same tasks, ``tether.training.run.gains``), "within noise" where the gain's interval
holds 0, "no update happened" when no step trained anything, and the commonest errors of failed rollouts; a
run stopped by Ctrl-C is ``interrupted`` and its summary says where the last checkpoint is and how to
continue — the library itself prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.training.run.gains import Interval, accuracy_interval, gain_interval
from tether.training.run.health import FAILURES_FILE, read_top_failures
from tether.training.signal.kv_metrics import kv_summary


@dataclass
class FitResult:
    run_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None
    plot: Path | None = None
    interrupted: bool = False
    #: why the run ended before its last step, evaluated and saved (GRPO: its groups stopped differing after
    #: it had trained); None when it ran every step
    stopped: str | None = None

    @property
    def evals(self) -> list[dict[str, Any]]:
        return [h for h in self.history if h.get("kind") == "eval"]

    @property
    def before(self) -> dict[str, Any] | None:
        return self.evals[0] if self.evals else None

    @property
    def after(self) -> dict[str, Any] | None:
        return self.evals[-1] if self.evals else None

    @property
    def message(self) -> str | None:
        """What an interrupted run left and how to continue it; None for a run that finished."""
        if not self.interrupted:
            return None
        resume = (
            f"Trainer(name={self.run_dir.name!r}, run_root={str(self.run_dir.parent)!r}).fit(..., resume=True)"
        )
        if self.checkpoint is None:
            return f"interrupted before the first checkpoint; the run folder is {self.run_dir}"
        return f"interrupted: the last checkpoint is in {self.checkpoint}; {resume} continues"

    def summary(self, labels: Mapping[str, str] | None = None, heading: str = "") -> str:
        """A before/after/gain table of the first and last evaluation, then where the curve, checkpoint and
        metrics are (after a line saying so when the run was interrupted). ``labels`` maps the eval metrics
        to show to their row labels (default: greedy and sampled accuracy); ``heading`` names the table's
        first column."""
        head = [self.message] if self.message else []
        if self.stopped:
            head.append(self.stopped)
        before, after = self.before, self.after
        if before is None or after is None:
            return "\n".join([*head, "no evaluation was recorded"])
        labels = labels or _DEFAULT_LABELS
        width = max(len(heading), *(len(label) for label in labels.values())) + 2
        sizes = {len(_per_task(ev, k)) for ev in (before, after) for k in labels} - {0}
        if sizes:
            n = "/".join(str(size) for size in sorted(sizes))
            head.append(f"held-out tasks: {n} · [95 % intervals; the gain's paired over the same tasks]")
        lines = [*head, f"{heading:{width}}{'before':>14}{'after':>14}{'gain':>8}"]
        for key, label in labels.items():
            # the first and last evaluation that measured it (the T=1 pass runs only at a run's ends by default)
            measured = [ev for ev in self.evals if key in ev]
            if measured:
                lines.append(f"{label:{width}}{self._row(key, measured[0], measured[-1])}")
        lines += self._notes()
        kv = kv_summary(self.history)  # (after the table: which call finds which turn's KV varies run to run)
        lines += ["", *([kv] if kv else []), f"curve: {self.plot}", f"checkpoint: {self.checkpoint}"]
        lines.append(f"metrics: {self.run_dir / 'metrics.jsonl'}")
        return "\n".join(lines)

    def _row(self, key: str, before: dict[str, Any], after: dict[str, Any]) -> str:
        """``  12% [6–22]   73% [60–83]   +61p [+48, +74]`` (intervals where the per-task rewards were kept)."""
        b, a = _per_task(before, key), _per_task(after, key)
        cells = [f"{before[key]:.0%}{_span(accuracy_interval(b) if b else None)}"]
        cells.append(f"{after[key]:.0%}{_span(accuracy_interval(a) if a else None)}")
        gain = (after[key] - before[key]) * 100
        interval = gain_interval(b, a) if b and a else None
        text = f"{gain:>+7.0f}p"
        if interval is not None:
            text += f" [{interval.low * 100:+.0f}, {interval.high * 100:+.0f}]"
            if interval.holds_zero and round(gain) != 0:
                text += " within noise"
        elif round(gain) != 0:
            text += " (no per-task rewards: noise unknown)"
        return f"{cells[0]:>14}{cells[1]:>14}{text}"

    @property
    def judge_cost(self) -> dict[str, float]:
        """What ``tether.Judge`` cost over the run's steps and evaluations (their records' ``judge/*``): calls,
        prompt and completion tokens, and judgements answered from the run's cache."""
        keys = ("judge/calls", "judge/prompt_tokens", "judge/completion_tokens", "judge/cache_hits")
        records = [h for h in self.history if h.get("kind") in ("train", "eval")]
        return {k: float(sum(h.get(k, 0.0) for h in records)) for k in keys}

    def _notes(self) -> list[str]:
        """Lines under the table: whether anything was trained, and the failed rollouts' commonest errors."""
        out = []
        steps = [h for h in self.history if h.get("kind") == "train" and "trained" in h]
        if steps and not any(h["trained"] for h in steps):
            why = steps[-1].get("idle") or "no step trained a transition"
            out.append(f"no update happened: none of the {len(steps)} steps trained anything ({why})")
        judge = self.judge_cost
        if judge["judge/calls"] or judge["judge/cache_hits"]:
            out.append(
                f"judge: {judge['judge/calls']:.0f} calls, {judge['judge/prompt_tokens']:.0f} prompt + "
                f"{judge['judge/completion_tokens']:.0f} completion tokens; {judge['judge/cache_hits']:.0f} "
                "judgements from the run's cache (tether.Judge)"
            )
        count, top = read_top_failures(self.run_dir / FAILURES_FILE)
        if count:
            commonest = "; ".join(f"{error} (x{n})" for error, n in top)
            out.append(f"failed rollouts: {count} (all in {self.run_dir / FAILURES_FILE}); commonest: {commonest}")
        return out


def _per_task(record: dict[str, Any], key: str) -> list[float]:
    """The per-task values an eval record kept for ``key`` (``greedy_accuracy`` -> ``greedy_rewards``,
    ``greedy_tool_rate`` -> ``greedy_tools``); empty when it kept none."""
    prefix, _, rest = key.partition("_")
    per_task = {"accuracy": "rewards", "tool_rate": "tools"}.get(rest)
    values = record.get(f"{prefix}_{per_task}") if per_task else None
    return [float(v) for v in values] if isinstance(values, list) else []


def _span(interval: Interval | None) -> str:
    return "" if interval is None else f" [{interval.low * 100:.0f}–{interval.high * 100:.0f}]"


_DEFAULT_LABELS = {"greedy_accuracy": "accuracy (greedy)", "sampled_accuracy": "accuracy (T=1)"}
