"""Prompts and weights in one run: ``Trainer(algorithm={"writer": tether.GRPO(...), "checker": tether.APO(...)})``.

A mapping from policy names (the keys of the wrapped agent's ``optimize=`` mapping) to algorithms becomes one
``Joint`` algorithm: GRPO trains the weights of its policy only (``GRPO.policies = [name]``), and APO searches a
prompt of the other policy's sub-agents — a template the agent reads, or a sub-agent's system message in
flight (``APO(system_message_of=...)``) — on the same session: one store, one proxy, one run folder.

**The schedule** (``settings.steps`` training steps; APO's ``rounds`` at most):

1. Setup: APO's starting prompts (captured from a first batch for ``system_message_of``) are scored on APO's
   validation tasks; they are the incumbent.
2. Each step, the GRPO batch (``tasks_per_step`` tasks × ``group_size`` rollouts, at GRPO's temperature) runs
   under the incumbent prompts, and GRPO updates its policy's weights from it.
3. Every ``apo_every`` steps, an APO round reuses that same batch: its low-scoring rollouts (run under the
   incumbent, by the weights just before the update) are the traces the optimizer critiques to rewrite the
   incumbent (``branch_factor`` rewrites). The rewrites **and the beam** are then scored on APO's validation
   tasks under the weights as they are now: the weights moved since the beam was scored, so old scores are
   not compared with new ones. The best ``beam_width`` form the beam; its best is the new incumbent.
4. Validation (GRPO's greedy and T=1 accuracy, under the incumbent) every ``eval_every`` steps and at the end;
   a checkpoint (the GRPO policy's weights and optimizer, and ``best_prompts.json``) after each.

What trains on what: GRPO trains only on its own batches (the candidate-scoring rollouts are validation
rollouts, greedy, under other prompts: never training data). APO chooses only by validation scores. So the
policy APO works for keeps its weights (GRPO trains another policy), and the GRPO policy's data always come
from the prompt the rest of the agent really runs with.

The run folder holds both parts: ``metrics.jsonl`` (GRPO's ``train``/``eval`` records and APO's ``apo``
records), the checkpoint, ``apo_history.jsonl``, ``best_prompts.json`` and ``best_prompt_<name>.txt``.
``resume=True`` continues the weights from the checkpoint and the prompt search from the incumbent saved with
it (``best_prompts.json``), appending to ``apo_history.jsonl``; the beam's other members are not restored, and
the APO round count starts again.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.algorithms import grpo_loop
from tether.algorithms.apo import APO
from tether.algorithms.apo_search import APOResult, BeamSearch, Candidate, select
from tether.algorithms.grpo_policies import trained_policies
from tether.training.progress import FitProgress
from tether.training.result import FitResult
from tether.types import PromptTemplate

if TYPE_CHECKING:
    from tether.models.base import ModelBackend
    from tether.plugin.wrap import WrappedAgent
    from tether.training.session import Session
    from tether.types import Task


@dataclass
class JointResult(APOResult):
    """A joint run: the history of both parts, GRPO's last checkpoint, APO's best prompts and candidates."""

    weights_policy: str | None = None
    prompt_policy: str | None = None


@dataclass
class Joint:
    """One run that trains one policy's weights and searches another's prompt (see the module docstring).

    ``parts``: policy name -> ``tether.GRPO(...)`` (at most one: it trains that policy's weights) or
    ``tether.APO(...)`` (at most one). ``apo_every``: training steps between two APO rounds.
    """

    parts: Mapping[str, Any]
    apo_every: int = 1
    _weights: tuple[str, Any] | None = field(default=None, init=False, repr=False)
    _prompts: tuple[str, APO] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.parts, Mapping) or not self.parts:
            raise ValueError(
                'algorithm= as a mapping takes policy names to algorithms, e.g. {"writer": tether.GRPO(...), '
                '"checker": tether.APO(...)}; got an empty or non-mapping value'
            )
        if isinstance(self.apo_every, bool) or not isinstance(self.apo_every, int) or self.apo_every < 1:
            raise ValueError(f"Joint(apo_every=...) must be a positive integer, got {self.apo_every!r}")
        for name, part in self.parts.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"algorithm= mapping keys are policy names (strings), got {name!r}")
            if isinstance(part, APO):
                if self._prompts is not None:
                    raise ValueError(
                        f"algorithm= has two APO searches ({self._prompts[0]!r} and {name!r}): a joint run "
                        "searches one policy's prompts"
                    )
                self._prompts = (name, part)
            elif _trains_weights(part):
                if self._weights is not None:
                    raise ValueError(
                        f"algorithm= has two weight-training algorithms ({self._weights[0]!r} and {name!r}): one "
                        "trains per backend model in a joint run; give one policy GRPO(...) and the other "
                        "APO(...), or train both policies' weights with one tether.GRPO() (policies=None)"
                    )
                current = getattr(part, "policies", None)
                if current is not None and list(current) != [name]:
                    raise ValueError(
                        f"algorithm[{name!r}] = GRPO(policies={list(current)!r}): in a joint run a GRPO trains "
                        f"the policy it is given to; drop policies= or make it [{name!r}]"
                    )
                self._weights = (name, part)
            else:
                raise TypeError(
                    f"algorithm[{name!r}] is a {type(part).__name__}: a joint run takes tether.GRPO(...) "
                    "(weights) or tether.APO(...) (prompts) per policy"
                )

    # -- checks ---------------------------------------------------------------------------------------------

    def check(self, agent: WrappedAgent) -> None:
        """``ValueError`` naming the agent's policies when a key is not one of them (or the agent has none),
        or naming a policy's sub-agents when APO's ``system_message_of`` is not one of them."""
        policies = agent.policies
        known = ", ".join(repr(n) for n in policies.names)
        if policies.shared:
            raise ValueError(
                "algorithm= as a mapping gives each policy its algorithm, but the agent has one shared policy: "
                'wrap it with optimize={"writer": [...sub-agents], "checker": [...]} (policy -> sub-agents)'
            )
        unknown = [n for n in self.parts if n not in policies.policies]
        if unknown:
            names = ", ".join(repr(n) for n in unknown)
            raise ValueError(
                f"algorithm= names {names}, not a policy of the wrapped agent; its policies (the keys of "
                f"tether.wrap(optimize=...)) are: {known}"
            )
        if self._prompts is not None and self._prompts[1].system_message_of is not None:
            name, apo = self._prompts
            agents = policies.policies[name]
            if agents is not None and apo.system_message_of not in agents:
                listed = ", ".join(repr(a) for a in sorted(agents))
                raise ValueError(
                    f"algorithm[{name!r}] = APO(system_message_of={apo.system_message_of!r}), but policy {name!r} "
                    f"serves the sub-agents {listed}: name one of them"
                )

    def _assign_policy(self) -> None:
        """GRPO trains its own policy only: ``policies=[name]`` (``check`` refused any other value)."""
        if self._weights is not None:
            self._weights[1].policies = [self._weights[0]]

    # -- the algorithm contract -----------------------------------------------------------------------------

    @property
    def uses_train_tasks(self) -> bool:
        return True

    def prepare_backend(self, backend: ModelBackend) -> None:
        """The weight-training part's ``prepare_backend`` (GRPO attaches its LoRA adapters)."""
        if self._weights is not None:
            self._assign_policy()
            prepare = getattr(self._weights[1], "prepare_backend", None)
            if prepare is not None:
                prepare(backend)

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        self.check(session.agent)
        self._assign_policy()
        if self._prompts is None:
            assert self._weights is not None
            result: FitResult = await self._weights[1].fit(session, train, val)
            return result
        if self._weights is None:
            return await self._prompts[1].fit(session, train, val)
        return await _JointRun(self, session, self._weights, self._prompts).fit(train, val)


class _JointRun:
    """The state of one joint run (see the module docstring for the schedule)."""

    def __init__(self, joint: Joint, session: Session, weights: tuple[str, Any], prompts: tuple[str, APO]) -> None:
        self.joint, self.session = joint, session
        (self.weights_policy, self.grpo), (self.prompt_policy, self.apo) = weights, prompts
        self.run = session.require_run("Joint")

    async def fit(self, train: Sequence[Task], val: Sequence[Task]) -> JointResult:
        session, apo, settings = self.session, self.apo, self.session.settings
        backend = grpo_loop.trainable_backend(self.grpo, session)
        await session.cancel_unfinished()
        loop = grpo_loop.Loop(self.grpo, session, backend, self.run)
        loop.policies = trained_policies(self.grpo.policies, session.agent.policies)
        if session.resume:
            await loop.restore()
        start = _saved_best(self.run.path) if session.resume else None
        start = start or await apo.start_prompts(session, train)
        optimizer, owned = apo._optimizer()
        search = BeamSearch(apo, session, optimizer, apo.targets(start), keep_history=session.resume)
        apo_rng = random.Random(f"apo:{apo.seed}")
        apo_val = apo_rng.sample(list(val or train), min(apo.val_batch_size, len(val or train)))
        rng = random.Random(f"{settings.seed}:{loop.step}")
        checkpoint = None
        try:
            await optimizer.start()
            await search.open_record()
            beam = [search.root(start)]
            await search.score(beam, apo_val)
            if beam[0].score is None:
                raise RuntimeError(
                    f"every validation rollout of the starting prompts failed: {search.first_error}"
                )
            loop.prompts = beam[0].prompts
            await search.log_round(0, beam, [], kind="apo", step=loop.step)
            rounds = 0
            with FitProgress(settings.steps, enabled=settings.progress, start=loop.step) as bar:
                if val and loop.step == 0:
                    loop.record(await grpo_loop.evaluate(session, val, step=0, prompts=loop.prompts), bar)
                while loop.step < settings.steps:
                    step = await loop.train_step(train, rng)
                    loop.record(step, bar)
                    loop.check_idle(step, settings.stop_after_idle_steps)
                    if rounds < apo.rounds and loop.step % self.joint.apo_every == 0:
                        rounds += 1
                        beam = await self._round(search, beam, loop, apo_val, rounds)
                        loop.prompts = beam[0].prompts
                    if loop.step % settings.eval_every == 0 or loop.step == settings.steps:
                        if val:
                            loop.record(
                                await grpo_loop.evaluate(session, val, step=loop.step, prompts=loop.prompts), bar
                            )
                        checkpoint = await loop.in_update_thread(loop.save)
                        search.write_result(beam[0], beam[0].resources_version or 0)
            best = beam[0]
            final = await session.store.add_resources(prompts=best.prompts)
            await search.close_record(best, final.version)
        finally:
            loop.close()
            if owned:
                await optimizer.close()
        prompt_result = search.write_result(best, final.version)
        history = sorted(
            [*loop.history, *search.metrics], key=lambda h: (h.get("step", 0), h.get("kind") == "apo")
        )
        return JointResult(
            run_dir=self.run.path,
            history=history,
            checkpoint=checkpoint,
            plot=self.run.plot(loop.history),
            best_prompts=prompt_result.best_prompts,
            best_score=prompt_result.best_score,
            candidates=prompt_result.candidates,
            weights_policy=self.weights_policy,
            prompt_policy=self.prompt_policy,
        )

    async def _round(
        self, search: BeamSearch, beam: list[Candidate], loop: grpo_loop.Loop, val: Sequence[Task], round_: int
    ) -> list[Candidate]:
        """One APO round on the step's GRPO batch (rollouts under the incumbent ``beam[0]``): rewrites of the
        incumbent, then the beam and the rewrites scored under the current weights; the new beam."""
        batch = loop.last_batch
        items = batch.results if batch is not None else []
        children = await search.rewrite(beam[0], items, round_, beam)
        for candidate in beam:
            candidate.score = None  # scored by older weights: score again with the new ones
        await search.score([*beam, *children], val)
        kept = select([*beam, *children], self.apo.beam_width) or beam[:1]
        await search.log_round(round_, kept, children, kind="apo", step=loop.step)
        return kept


def _saved_best(run_dir: Path) -> dict[str, PromptTemplate] | None:
    """The incumbent prompts saved with the run's last checkpoint (``best_prompts.json``), if any."""
    path = run_dir / "best_prompts.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())["prompts"]
    return {name: PromptTemplate.from_dict(value) for name, value in saved.items()}


def _trains_weights(part: Any) -> bool:
    """Whether ``part`` is a weight-training algorithm the joint loop can drive (GRPO's shape)."""
    return all(hasattr(part, name) for name in ("fit", "update", "group_size", "tasks_per_step", "state_dict"))


__all__ = ["Joint", "JointResult"]
