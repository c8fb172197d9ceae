"""APO: automatic prompt optimization by textual-gradient beam search over named prompt templates.

The templates live in resources (``Resources.prompts``); the agent reads them there (``tether.wrap(agent,
run=lambda agent, task, resources: ...)``). Each round, every prompt candidate in the beam runs on a batch of
training tasks; the optimizer model reads traces of the low-scoring rollouts — every LLM call, tool call and
tool result, from the rollout's spans — writes a critique of one template (the textual gradient) and a
rewrite following it. Rewrites that keep the template's placeholders are published as new resources versions
and scored on the same validation tasks; the best ``beam_width`` candidates (old and new) form the next beam.

Everything is kept: each candidate is a resources version in the store, the history (prompts, critiques,
scores) is a series of ``apo.candidate`` spans on one record rollout, and the run folder gets
``apo_history.jsonl``, ``best_prompts.json``, ``best_prompt_<name>.txt`` and ``metrics.jsonl``. At the end the
best prompts are published as the latest resources version.

``Trainer(model=<agent model>, algorithm=APO(optimizer_model="http://…/v1", ...)).fit(agent, train, val)``.

**A system message in flight.** ``APO(system_message_of="check_query")`` optimizes that sub-agent's system
message for an agent that does not read prompts from resources: a first batch of rollouts (the training tasks,
``train_batch_size`` of them) captures the exact system message its calls send, which becomes the starting
template ``system_message[check_query]``, the rule its data (``PromptTemplate.system_message_of`` and
``replaces``: the sub-agent and the captured text, kept by every rewrite); the proxy swaps each candidate into
that sub-agent's calls of the candidate's rollouts (``tether.proxy.system_messages``). The agent's code does
not change.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.algorithms import apo_prompts as _text
from tether.algorithms.apo_search import APOResult, BeamSearch, Candidate, select
from tether.algorithms.base import Algorithm
from tether.models.base import ModelBackend
from tether.proxy import system_messages as _system
from tether.training.run.progress import FitProgress
from tether.types import Mode, PromptTemplate

if TYPE_CHECKING:
    from tether.store import Store
    from tether.training.engine.session import Session
    from tether.types import Task

_ENGINES = ("f-string", "jinja")


@dataclass
class APO(Algorithm):
    """Textual-gradient beam search over prompt templates.

    ``optimizer_model``: the model that critiques and rewrites — an OpenAI-compatible URL (``api_key`` or
    ``$OPENAI_API_KEY``, ``optimizer_model_name``) or a ``ModelBackend``. ``prompts``: the starting templates
    by name (strings are f-string templates); None takes them from the store's latest resources.
    ``optimize``: the names of the templates to rewrite (default: all). Each round: ``train_batch_size``
    training tasks per beam candidate, up to ``max_traces`` low-scoring traces per critique,
    ``branch_factor`` rewrites per candidate, each scored on the same ``val_batch_size`` validation tasks
    (the training tasks when no ``val`` is given). Rollouts count as good at ``success_reward`` or above.
    ``system_message_of``: the name of a sub-agent whose system message to optimize in flight instead of
    templates the agent reads (see the module docstring); ``prompts`` and ``optimize`` are then not given.
    """

    optimizer_model: str | ModelBackend
    prompts: Mapping[str, PromptTemplate | str] | None = None
    optimize: Sequence[str] | str | None = None
    beam_width: int = 2
    branch_factor: int = 2
    rounds: int = 3
    train_batch_size: int = 8
    val_batch_size: int = 16
    max_traces: int = 3
    success_reward: float = 1.0
    temperature: float = 0.0  # the agent model's sampling temperature in APO's rollouts
    optimizer_model_name: str | None = None
    api_key: str | None = None
    optimizer_temperature: float = 1.0
    optimizer_max_tokens: int = 1024
    seed: int = 0
    system_message_of: str | None = None

    def __post_init__(self) -> None:
        for name in ("beam_width", "branch_factor", "rounds", "train_batch_size", "val_batch_size", "max_traces"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"APO({name}=...) must be a positive integer, got {value!r}")
        if not isinstance(self.optimizer_model, str | ModelBackend):
            raise TypeError(
                'optimizer_model must be an OpenAI-compatible URL such as "http://localhost:8000/v1" or a '
                f"ModelBackend, got {type(self.optimizer_model).__name__}"
            )
        if self.prompts is not None:
            self.prompts = _as_templates(self.prompts)
        if self.system_message_of is not None:
            if not isinstance(self.system_message_of, str) or not self.system_message_of:
                raise ValueError(
                    f"APO(system_message_of=...) takes a sub-agent name, got {self.system_message_of!r}"
                )
            if self.prompts is not None or self.optimize is not None:
                raise ValueError(
                    "APO(system_message_of=...) optimizes that sub-agent's captured system message: drop "
                    "prompts= and optimize= (they name templates the agent reads from resources)"
                )

    # -- the algorithm contract: what preflight's rollouts run under --------------------------------------------

    def given_prompts(self) -> dict[str, PromptTemplate] | None:
        """The starting templates given as ``prompts=``, if any."""
        return _as_templates(self.prompts) if self.prompts is not None else None

    def reads_store_prompts(self) -> bool:
        """Whether the search starts from the store's templates (no ``prompts=``)."""
        return self.prompts is None

    # -- setup ----------------------------------------------------------------------------------------------

    def targets(self, prompts: Mapping[str, PromptTemplate]) -> list[str]:
        """The template names to rewrite; ``ValueError`` naming the known templates for an unknown name."""
        known = ", ".join(repr(n) for n in prompts) or "none"
        if self.system_message_of is not None:
            agent = self.system_message_of
            names = [n for n, t in prompts.items() if t.system_message_of == agent] or [_system.prompt_name(agent)]
        elif self.optimize is None:
            names = list(prompts)
        else:
            names = [self.optimize] if isinstance(self.optimize, str) else list(self.optimize)
        unknown = [n for n in names if n not in prompts]
        if unknown:
            quoted = ", ".join(repr(n) for n in unknown)
            raise ValueError(f"unknown prompt template {quoted} in APO(optimize=...); the templates are: {known}")
        if not names:
            raise ValueError(f"APO(optimize=...) names no template; the templates are: {known}")
        for name in names:
            try:
                _text.template_fields(prompts[name])
            except ValueError as exc:
                raise ValueError(f"prompt template {name!r} does not parse: {exc}") from None
        return names

    def _optimizer(self) -> tuple[ModelBackend, bool]:
        if isinstance(self.optimizer_model, ModelBackend):
            return self.optimizer_model, False
        spec = self.optimizer_model.strip()
        if spec.startswith(("http://", "https://")):
            from tether.models.remote import RemoteBackend

            key = self.api_key or os.environ.get("OPENAI_API_KEY")
            return RemoteBackend(spec, api_key=key, model=self.optimizer_model_name), True
        from tether.models import open_backend

        return open_backend(spec), True

    async def start_prompts(self, session: Session, train: Sequence[Task]) -> dict[str, PromptTemplate]:
        """The search's starting templates: ``prompts``, else the store's latest; with ``system_message_of``,
        those plus the sub-agent's system message (the store's, else captured from a first batch)."""
        if self.system_message_of is None:
            return (
                _as_templates(self.prompts) if self.prompts is not None else await _stored_prompts(session.store)
            )
        agent = self.system_message_of
        latest = await session.store.get_resources()
        stored = dict(latest.prompts) if latest is not None else {}
        if any(t.system_message_of == agent for t in stored.values()):
            return stored  # published by an earlier run of this search (a resumed run)
        rng = random.Random(f"apo-capture:{self.seed}")
        tasks = rng.sample(list(train), min(self.train_batch_size, len(train)))
        batch = await session.run_batch(tasks, 1, {"temperature": self.temperature}, Mode.VAL)
        text, variants = _system.captured_system_message((r.spans for r in batch.results), agent)
        if variants > 1:
            warnings.warn(
                f"sub-agent {agent!r} sent {variants} different system messages in the first rollouts: APO "
                "optimizes the most frequent one; calls with another system message are left as they are",
                stacklevel=2,
            )
        return {**stored, **_system.templates(agent, text)}

    # -- the search (the algorithm contract: called by Trainer.fit) ------------------------------------------

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> APOResult:
        """Search the prompt templates on ``session`` (the model stays as it is); the best become the latest
        resources version."""
        store = session.store
        start = await self.start_prompts(session, train)
        targets = self.targets(start)
        optimizer, owned = self._optimizer()
        search = BeamSearch(self, session, optimizer, targets)
        rng = random.Random(f"apo:{self.seed}")
        val_tasks = rng.sample(list(val or train), min(self.val_batch_size, len(val or train)))
        try:
            await optimizer.start()
            await search.open_record()
            root = Candidate("c0", dict(start), round=0)
            await search.score([root], val_tasks)
            if root.score is None:
                raise RuntimeError(
                    f"every validation rollout of the starting prompts failed: {search.first_error}"
                )
            beam = [root]
            await search.log_round(0, beam, [])
            with FitProgress(self.rounds, enabled=session.settings.progress) as bar:
                bar.update({"kind": "eval", "step": 0, "greedy_accuracy": root.score})
                for round_ in range(1, self.rounds + 1):
                    batch = rng.sample(list(train), min(self.train_batch_size, len(train)))
                    children, batch_reward, rate = await search.expand(beam, batch, round_)
                    await search.score(children, val_tasks)
                    beam = select(beam + children, self.beam_width)
                    record = await search.log_round(round_, beam, children)
                    bar.update({"kind": "train", "step": round_, "reward": batch_reward, "rollouts_per_s": rate})
                    bar.update(record)
            best = beam[0]
            final = await store.add_resources(prompts=best.prompts)
            await search.close_record(best, final.version)
        finally:
            if owned:
                await optimizer.close()
        return search.write_result(best, final.version)


def _as_templates(prompts: Mapping[str, PromptTemplate | str]) -> dict[str, PromptTemplate]:
    if not isinstance(prompts, Mapping) or not prompts:
        raise ValueError("APO(prompts=...) takes a non-empty dict of name -> PromptTemplate (or template string)")
    out: dict[str, PromptTemplate] = {}
    for name, value in prompts.items():
        template = PromptTemplate(value) if isinstance(value, str) else value
        if not isinstance(name, str) or not name or not isinstance(template, PromptTemplate):
            raise TypeError(f"APO(prompts=...): {name!r} must map a name to a PromptTemplate or a string")
        if template.engine not in _ENGINES:
            raise ValueError(
                f"prompt template {name!r}: engine must be 'f-string' or 'jinja', not {template.engine!r}"
            )
        out[name] = template
    return out


async def _stored_prompts(store: Store) -> dict[str, PromptTemplate]:
    resources = await store.get_resources()
    if resources is None or not resources.prompts:
        raise ValueError(
            "APO has no prompt templates to optimize: pass APO(prompts={'name': tether.PromptTemplate(...)}) "
            "or publish them first with store.add_resources(prompts=...)"
        )
    return dict(resources.prompts)


__all__ = [
    "APO",
]
