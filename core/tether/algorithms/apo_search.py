"""The state and steps of one APO search: candidates, their rollouts and scores, the optimizer's critiques
and rewrites, and the records kept of them (store spans, run folder files).

``tether.algorithms.apo.APO`` holds the settings and drives the rounds; ``BeamSearch`` does the work of each,
on the ``Session`` that ``Trainer.fit`` opens (each candidate's rollouts run under its own resources version,
all candidates of a round in one batch).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether import spans
from tether.algorithms import apo_prompts as _text
from tether.models.base import ChatRequest, ModelBackend
from tether.training.engine.session import Session
from tether.training.run.result import FitResult
from tether.training.signal.batch import Job, RolloutResult
from tether.types import AttemptStatus, Mode, PromptTemplate, RolloutStatus, Span, SpanKind, Task


class SearchSettings(Protocol):
    """The settings of ``tether.algorithms.apo.APO`` that a search reads."""

    temperature: float
    success_reward: float
    max_traces: int
    branch_factor: int
    optimizer_temperature: float
    optimizer_max_tokens: int
    optimizer_model_name: str | None


@dataclass
class Candidate:
    """One set of prompts in the search, with its validation score once scored."""

    id: str
    prompts: dict[str, PromptTemplate]
    round: int
    parent: str | None = None
    edited: str | None = None  # the template this candidate rewrote
    critique: str | None = None
    score: float | None = None
    failed: int = 0
    resources_version: int | None = None

    def record(self, **extra: Any) -> dict[str, Any]:
        return {
            "candidate": self.id,
            "round": self.round,
            "parent": self.parent,
            "edited": self.edited,
            "score": self.score,
            "failed": self.failed,
            "resources_version": self.resources_version,
            "prompts": {k: v.to_dict() for k, v in self.prompts.items()},
            "critique": self.critique,
            **extra,
        }


@dataclass
class APOResult(FitResult):
    best_prompts: dict[str, PromptTemplate] = field(default_factory=dict)
    best_score: float | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)


def select(candidates: Sequence[Candidate], width: int) -> list[Candidate]:
    """The ``width`` best scored candidates; ties keep the older one (it has been scored as often or more)."""
    scored = [c for c in candidates if c.score is not None]
    order = {c.id: i for i, c in enumerate(candidates)}
    return sorted(scored, key=lambda c: (-(c.score or 0.0), order[c.id]))[:width]


class BeamSearch:
    """The state of one search: the store record, the run folder files, the optimizer calls."""

    def __init__(
        self,
        apo: SearchSettings,
        session: Session,
        optimizer: ModelBackend,
        targets: list[str],
        *,
        keep_history: bool = False,
    ) -> None:
        """``keep_history``: append to the run folder's ``apo_history.jsonl`` (a resumed run) instead of
        starting it empty."""
        self.apo, self.session = apo, session
        self.store = session.store
        self.run = session.require_run("APO")
        self.optimizer = optimizer
        self.targets = targets
        self.history: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.first_error = "no rollout ran"
        self._ids = 0
        self._record: tuple[str, str] | None = None  # (rollout id, attempt id) holding the history spans
        self.history_path = self.run.path / "apo_history.jsonl"
        if keep_history and self.history_path.exists():
            self._ids = len(self.history_path.read_text().splitlines())  # new candidates get new ids
        else:
            self.history_path.write_text("")

    # -- rollouts -------------------------------------------------------------------------------------------

    async def _rollouts(
        self, jobs: Sequence[tuple[Candidate, Sequence[Task]]], mode: Mode
    ) -> dict[str, list[RolloutResult]]:
        """Run each candidate's tasks under its own resources version, all in one batch; results by candidate."""
        sampling = {"temperature": self.apo.temperature}
        runs: list[Job] = []
        for candidate, tasks in jobs:
            if candidate.resources_version is None:
                candidate.resources_version = await self.session.publish(sampling, prompts=candidate.prompts)
            runs.append(Job(tasks, candidate.resources_version, metadata={spans.APO_CANDIDATE: candidate.id}))
        batches = await self.session.run_jobs(runs, mode)
        out: dict[str, list[RolloutResult]] = {}
        for (candidate, _), batch in zip(jobs, batches, strict=True):
            for item in batch.results:
                out.setdefault(candidate.id, []).append(item)
                if item.rollout.error and self.first_error == "no rollout ran":
                    self.first_error = item.rollout.error.strip().splitlines()[-1]
        return out

    async def score(self, candidates: Sequence[Candidate], tasks: Sequence[Task]) -> None:
        """Mean reward of each candidate on ``tasks`` (failed rollouts count 0; all failed: no score)."""
        if not candidates:
            return
        results = await self._rollouts([(c, tasks) for c in candidates], Mode.VAL)
        for candidate in candidates:
            rollouts = [item.rollout for item in results.get(candidate.id, [])]
            candidate.failed = sum(r.status != RolloutStatus.SUCCEEDED for r in rollouts)
            if rollouts and candidate.failed < len(rollouts):
                candidate.score = sum(r.reward or 0.0 for r in rollouts) / len(rollouts)

    async def expand(
        self, beam: Sequence[Candidate], batch: Sequence[Task], round_: int
    ) -> tuple[list[Candidate], float, float]:
        """Rewrites of each beam candidate from critiques of its low-scoring rollouts on ``batch``."""
        started = time.perf_counter()
        results = await self._rollouts([(c, batch) for c in beam], Mode.TRAIN)
        seconds = time.perf_counter() - started
        all_rollouts = [item.rollout for items in results.values() for item in items]
        children: list[Candidate] = []
        for parent in beam:
            children += await self.rewrite(parent, results.get(parent.id, []), round_, [*beam, *children])
        mean_all = sum(r.reward or 0.0 for r in all_rollouts) / max(len(all_rollouts), 1)
        return children, mean_all, len(all_rollouts) / max(seconds, 1e-9)

    async def rewrite(
        self, parent: Candidate, items: Sequence[RolloutResult], round_: int, known: Sequence[Candidate]
    ) -> list[Candidate]:
        """Rewrites of ``parent`` from critiques of its low-scoring rollouts among ``items`` (rollouts run under
        its prompts); none when every rollout succeeded. Rewrites that break the template or repeat one of
        ``known`` (or of each other) are recorded as rejected."""
        mean = sum(i.rollout.reward or 0.0 for i in items) / max(len(items), 1)
        low = sorted(
            (i for i in items if (i.rollout.reward or 0.0) < self.apo.success_reward),
            key=lambda i: i.rollout.reward or 0.0,
        )[: self.apo.max_traces]
        if not low:
            return []  # every rollout succeeded: nothing to learn from this batch
        traces = [_text.render_trace(i.rollout, i.spans) for i in low]
        children: list[Candidate] = []
        for branch in range(self.apo.branch_factor):
            name = self.targets[(branch + round_) % len(self.targets)]
            critique = await self._ask(_text.critique_messages(parent.prompts, name, traces, mean))
            reply = await self._ask(_text.rewrite_messages(parent.prompts[name], name, critique))
            new_text = _text.parse_rewrite(reply)
            child = Candidate(
                self._next_id(),
                {**parent.prompts, name: dataclasses.replace(parent.prompts[name], template=new_text)},
                round=round_,
                parent=parent.id,
                edited=name,
                critique=critique,
            )
            problem = _text.check_rewrite(parent.prompts[name], new_text)
            duplicate = any(c.prompts == child.prompts for c in [*known, *children])
            if problem or duplicate:
                await self._keep(child.record(status="rejected", reason=problem or "same as a known candidate"))
                continue
            children.append(child)
        return children

    async def _ask(self, messages: list[dict[str, str]]) -> str:
        request = ChatRequest(
            messages=[dict(m) for m in messages],
            temperature=self.apo.optimizer_temperature,
            max_tokens=self.apo.optimizer_max_tokens,
            model=self.apo.optimizer_model_name,
        )
        result = await self.optimizer.chat(request)
        content = result.choices[0].message.get("content") if result.choices else None
        return str(content or "")

    def root(self, prompts: dict[str, PromptTemplate]) -> Candidate:
        """The search's first candidate: ``c0``, or the next free id when the history is kept."""
        return Candidate("c0" if not self._ids else self._next_id(), dict(prompts), round=0)

    def _next_id(self) -> str:
        self._ids += 1
        return f"c{self._ids}"

    # -- records --------------------------------------------------------------------------------------------

    async def log_round(
        self,
        round_: int,
        beam: Sequence[Candidate],
        children: Sequence[Candidate],
        *,
        kind: str = "eval",
        step: int | None = None,
    ) -> dict[str, Any]:
        """Keep the round's new candidates and log its metrics record (``kind``, ``step``: the round unless
        given; a joint run logs ``kind="apo"`` at its training step)."""
        beam_ids = [c.id for c in beam]
        for candidate in [beam[0]] if round_ == 0 else children:
            status = "scored" if candidate.score is not None else "failed"
            await self._keep(candidate.record(status=status, in_beam=candidate.id in beam_ids))
        key = "greedy_accuracy" if self.apo.temperature == 0 else "sampled_accuracy"
        record = {
            "kind": kind,
            "step": round_ if step is None else step,
            "round": round_,
            "score": beam[0].score,
            key: beam[0].score,
            "best": beam[0].id,
            "beam": beam_ids,
            "beam_scores": [c.score for c in beam],
            "candidates": len(children),
        }
        self.metrics.append(record)
        self.run.log(record)
        return record

    async def _keep(self, entry: dict[str, Any]) -> None:
        entry = {"time": time.time(), **entry}
        self.history.append(entry)
        with self.history_path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        if self._record is not None:
            rollout_id, attempt_id = self._record
            span = Span(rollout_id, attempt_id, SpanKind.OTHER, spans.APO_CANDIDATE, attributes=entry)
            await self.store.add_spans([span])

    async def open_record(self) -> None:
        """A rollout that holds the search history as spans (it is claimed here, never run by a runner)."""
        if await self.store.list_rollouts(status=RolloutStatus.QUEUED, limit=1):
            await self.session.runner.run_until_idle()  # an earlier run left rollouts queued: finish them first
        self._record = await self.session.open_record("apo")

    async def close_record(self, best: Candidate, version: int) -> None:
        if self._record is None:
            return
        output = {
            "best": best.id,
            "resources_version": version,
            "prompts": {k: v.template for k, v in best.prompts.items()},
        }
        await self.store.finish_attempt(self._record[1], AttemptStatus.SUCCEEDED, output=output, reward=best.score)

    def write_result(self, best: Candidate, version: int) -> APOResult:
        prompts = {name: t.to_dict() for name, t in best.prompts.items()}
        summary = {"candidate": best.id, "score": best.score, "resources_version": version, "prompts": prompts}
        (self.run.path / "best_prompts.json").write_text(json.dumps(summary, indent=2) + "\n")
        for name, template in best.prompts.items():
            (self.run.path / f"best_prompt_{_file_name(name)}.txt").write_text(template.template + "\n")
        return APOResult(
            run_dir=self.run.path,
            history=list(self.metrics),
            best_prompts=dict(best.prompts),
            best_score=best.score,
            candidates=list(self.history),
        )


def _file_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
