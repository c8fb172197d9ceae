"""Prompts and weights in one run: ``Trainer(algorithm={"writer": tether.GRPO(...), "checker": tether.APO(...)})``.

A mapping from policy names (the keys of the wrapped agent's ``optimize=`` mapping) to algorithms becomes one
``Joint`` algorithm: GRPO trains the weights of its policy only (``GRPO.policies = [name]``), and APO searches a
prompt of the other policy's sub-agents — a template the agent reads, or a sub-agent's system message in
flight (``APO(system_message_of=...)``) — on the same session: one store, one proxy, one run folder. The run is
GRPO's own loop (``grpo_loop.fit``) with the prompt search in its hooks (``_PromptSearch``, a
``grpo_loop.LoopHooks``): no second copy of the steps, evaluations, checkpoints or resume.

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
4. Validation (GRPO's greedy accuracy, and T=1 before the first step and after the last, under the incumbent)
   every ``eval_every`` steps and at the end;
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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.algorithms.apo import APO
from tether.algorithms.apo_search import APOResult, BeamSearch, Candidate, select
from tether.algorithms.base import Algorithm
from tether.algorithms.grpo import loop as grpo_loop
from tether.algorithms.grpo.loop import LoopHooks, PolicyUpdate
from tether.training.run.preflight import PreflightGroup
from tether.training.run.result import FitResult
from tether.types import PromptTemplate

if TYPE_CHECKING:
    from tether.models.base import ModelBackend
    from tether.plugin.wrap import WrappedAgent
    from tether.training.engine.session import Session
    from tether.types import Task


@dataclass
class JointResult(APOResult):
    """A joint run: the history of both parts, GRPO's last checkpoint, APO's best prompts and candidates."""

    weights_policy: str | None = None
    prompt_policy: str | None = None


@dataclass
class Joint(Algorithm):
    """One run that trains one policy's weights and searches another's prompt (see the module docstring).

    ``parts``: policy name -> ``tether.GRPO(...)`` (at most one: it trains that policy's weights) or
    ``tether.APO(...)`` (at most one). ``apo_every``: training steps between two APO rounds.
    """

    parts: Mapping[str, Any]
    apo_every: int = 1
    _weights: tuple[str, PolicyUpdate] | None = field(default=None, init=False, repr=False)
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
            elif isinstance(part, PolicyUpdate):
                if self._weights is not None:
                    raise ValueError(
                        f"algorithm= has two weight-training algorithms ({self._weights[0]!r} and {name!r}): one "
                        "trains per backend model in a joint run; give one policy GRPO(...) and the other "
                        "APO(...), or train both policies' weights with one tether.GRPO() (policies=None)"
                    )
                current = part.policies
                if current is not None and list(current) != [name]:
                    raise ValueError(
                        f"algorithm[{name!r}] = GRPO(policies={list(current)!r}): in a joint run a GRPO trains "
                        f"the policy it is given to; drop policies= or make it [{name!r}]"
                    )
                self._weights = (name, part)
            else:
                raise TypeError(
                    f"algorithm[{name!r}] is a {type(part).__name__}: a joint run takes tether.GRPO(...) "
                    "(weights: any tether.algorithms.grpo.loop.PolicyUpdate) or tether.APO(...) (prompts) "
                    "per policy"
                )

    # -- the algorithm contract -----------------------------------------------------------------------------

    def check_agent(self, agent: WrappedAgent) -> None:
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

    check = check_agent  # (the name before the contract had one)

    def _assign_policy(self) -> None:
        """GRPO trains its own policy only: ``policies=[name]`` (``check_agent`` refused any other value)."""
        if self._weights is not None:
            self._weights[1].policies = [self._weights[0]]

    @property
    def _algorithms(self) -> list[Algorithm]:
        """The weight-training part and the prompt search, those given."""
        chosen: list[Algorithm] = [self._weights[1]] if self._weights is not None else []
        return chosen + ([self._prompts[1]] if self._prompts is not None else [])

    @property
    def scale_by_std(self) -> bool:
        """The weight-training part's (part of the credit rule every rollout records)."""
        return self._weights[1].scale_by_std if self._weights is not None else True

    @property
    def preflight_group(self) -> PreflightGroup | None:
        return self._weights[1].preflight_group if self._weights is not None else None

    def given_prompts(self) -> dict[str, Any] | None:
        return self._prompts[1].given_prompts() if self._prompts is not None else None

    def reads_store_prompts(self) -> bool:
        return self._prompts is not None and self._prompts[1].reads_store_prompts()

    def prepare_backend(self, backend: ModelBackend) -> None:
        """The weight-training part's ``prepare_backend`` (GRPO attaches its LoRA adapters)."""
        self._assign_policy()
        for part in self._algorithms:
            part.prepare_backend(backend)

    def check_session(self, session: Session) -> None:
        """Each part's ``check_session`` (GRPO refuses a backend it cannot train)."""
        self._assign_policy()
        for part in self._algorithms:
            part.check_session(session)

    async def fit(self, session: Session, train: Sequence[Task], val: Sequence[Task]) -> FitResult:
        self.check_agent(session.agent)
        self._assign_policy()
        if self._prompts is None:
            assert self._weights is not None
            return await self._weights[1].fit(session, train, val)
        if self._weights is None:
            return await self._prompts[1].fit(session, train, val)
        (weights_policy, grpo), (prompt_policy, apo) = self._weights, self._prompts
        search = _PromptSearch(self, session, apo, train, val, (weights_policy, prompt_policy))
        return await grpo.fit_with(session, train, val, search)


class _PromptSearch(LoopHooks):
    """APO's part of a joint run, in GRPO's loop (see the module docstring for the schedule): the starting
    prompts scored before the first evaluation, a round after every ``apo_every`` steps on that step's batch,
    the incumbent written with each checkpoint and published at the end."""

    def __init__(
        self,
        joint: Joint,
        session: Session,
        apo: APO,
        train: Sequence[Task],
        val: Sequence[Task],
        policies: tuple[str, str],
    ) -> None:
        self.joint, self.session, self.apo, self.train = joint, session, apo, train
        self.weights_policy, self.prompt_policy = policies
        apo_rng = random.Random(f"apo:{apo.seed}")
        self.val = apo_rng.sample(list(val or train), min(apo.val_batch_size, len(val or train)))
        self.optimizer: ModelBackend | None = None
        self.owned = False
        self.search: BeamSearch | None = None
        self.beam: list[Candidate] = []
        self.rounds = 0

    async def start(self, loop: grpo_loop.Loop) -> None:
        session, apo = self.session, self.apo
        start = _saved_best(loop.run.path) if session.resume else None
        start = start or await apo.start_prompts(session, self.train)
        self.optimizer, self.owned = apo._optimizer()
        targets = apo.targets(start)
        search = self.search = BeamSearch(apo, session, self.optimizer, targets, keep_history=session.resume)
        await self.optimizer.start()
        await search.open_record()
        self.beam = [search.root(start)]
        await search.score(self.beam, self.val)
        if self.beam[0].score is None:
            raise RuntimeError(f"every validation rollout of the starting prompts failed: {search.first_error}")
        loop.prompts = self.beam[0].prompts
        await search.log_round(0, self.beam, [], kind="apo", step=loop.step)

    async def after_step(self, loop: grpo_loop.Loop) -> None:
        """One APO round on the step's GRPO batch (rollouts under the incumbent ``beam[0]``), when one is due:
        rewrites of the incumbent, then the beam and the rewrites scored under the current weights."""
        if self.rounds >= self.apo.rounds or loop.step % self.joint.apo_every != 0:
            return
        assert self.search is not None
        self.rounds += 1
        search, beam = self.search, self.beam
        items = loop.last_batch.results if loop.last_batch is not None else []
        children = await search.rewrite(beam[0], items, self.rounds, beam)
        for candidate in beam:
            candidate.score = None  # scored by older weights: score again with the new ones
        await search.score([*beam, *children], self.val)
        self.beam = select([*beam, *children], self.apo.beam_width) or beam[:1]
        await search.log_round(self.rounds, self.beam, children, kind="apo", step=loop.step)
        loop.prompts = self.beam[0].prompts

    async def after_checkpoint(self, loop: grpo_loop.Loop) -> None:
        assert self.search is not None
        self.search.write_result(self.beam[0], self.beam[0].resources_version or 0)

    async def finish(self, loop: grpo_loop.Loop, result: FitResult) -> JointResult:
        assert self.search is not None
        search, best = self.search, self.beam[0]
        final = await self.session.store.add_resources(prompts=best.prompts)
        await search.close_record(best, final.version)
        prompt_result = search.write_result(best, final.version)
        history = sorted(
            [*loop.history, *search.metrics], key=lambda h: (h.get("step", 0), h.get("kind") == "apo")
        )
        # APO's result (its best prompts and candidates) with the run's folder, checkpoint and plot, both histories
        joined = {f.name: getattr(prompt_result, f.name) for f in fields(prompt_result)}
        joined.update(run_dir=result.run_dir, history=history, checkpoint=result.checkpoint, plot=result.plot)
        return JointResult(**joined, weights_policy=self.weights_policy, prompt_policy=self.prompt_policy)

    async def close(self) -> None:
        if self.owned and self.optimizer is not None:
            await self.optimizer.close()


def _saved_best(run_dir: Path) -> dict[str, PromptTemplate] | None:
    """The incumbent prompts saved with the run's last checkpoint (``best_prompts.json``), if any."""
    path = run_dir / "best_prompts.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())["prompts"]
    return {name: PromptTemplate.from_dict(value) for name, value in saved.items()}


__all__ = ["Joint", "JointResult"]
