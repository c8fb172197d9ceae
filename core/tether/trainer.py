"""The Trainer: the user's façade. Settings once, then ``dev``, ``evaluate`` and ``fit``.

``dev`` runs tasks once (or ``repeats`` times) with no training and returns every rollout's status, output,
reward, spans and transitions with their advantages — for checking an agent's wiring. ``evaluate`` returns the
metrics of such a run. ``fit`` opens the run folder and a ``tether.training.engine.session.Session`` (store, model
backend, proxy, runner; only the settings, agent and run folder for an algorithm whose ``uses_session`` is
False) and hands it to the algorithm, calling the parts of its contract (``tether.algorithms.base.Algorithm``)
in their order: the Trainer knows nothing of how an algorithm trains.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether._loop import run_sync
from tether.algorithms.base import Algorithm, SupportsFit, check_algorithm, name_of
from tether.capture.span_batcher import install_sigterm_flush
from tether.models import check_model
from tether.models.base import ModelBackend
from tether.otel.export import OTLPExport
from tether.plugin.wrap import WrappedAgent
from tether.training.engine.ray_runners import RayRunners
from tether.training.engine.session import Session, as_task
from tether.training.run.dev_report import DevReport, all_zero, report
from tether.training.run.health import check_idle_limit
from tether.training.run.preflight import check_group_rewards, run_preflight
from tether.training.run.report import check_report_to, reporting
from tether.training.run.result import FitResult
from tether.training.run.run_dir import RunDir
from tether.training.run.settings import EvalSampled, Settings, check_counts, check_eval_sampled
from tether.training.signal.credit import Credit, CreditRule
from tether.types import DEFAULT_HEARTBEAT_TIMEOUT_S, Mode, Task

#: the settings that are not the Trainer's field of the same name as it is: ``sampling`` is copied, and
#: ``scale_by_std`` is the algorithm's
_NOT_OWN = frozenset({"sampling", "scale_by_std"})


@dataclass(slots=True)
class Trainer:
    """Configure once, then ``dev`` / ``evaluate`` (and ``fit`` once an algorithm is given).

    ``model``: ``"embedded"``, ``"embedded:<dir>"``, ``"hf:<path>"``, ``"vllm:<model>"``, an
    OpenAI-compatible URL, or a ``ModelBackend`` object (which stays open: its owner closes it).
    ``algorithm``: what ``fit`` trains with — ``tether.GRPO(...)``, ``tether.APO(...)``, a subclass of
    ``tether.Algorithm``, or any object with ``async def fit(session, train, val) -> FitResult``; or a mapping
    from the agent's policy names to algorithms, ``{"writer": tether.GRPO(...), "checker": tether.APO(...)}``: one
    run that trains one policy's weights and searches another's prompt (``tether.Joint``); or a list of them, run
    in order in one run folder with one curve (``[tether.WarmStart(...), tether.GRPO(...)]``,
    ``tether.algorithms.stages``).
    ``store``: a store URL (``memory:`` by default for ``dev``, ``runs/<name>/store.db`` for ``fit``).
    ``runners``: where rollouts run: None, ``n_runners`` at a time in this process; ``tether.RayRunners(n=...)``
    in Ray actors (``pip install "tether[ray]"``). ``heartbeat_timeout_s``: how long a rollout attempt may go
    without a heartbeat before it counts as its runner's death (ended and retried within ``max_attempts``).
    ``stop_after_idle_steps``: ``fit`` stops with a ``tether.FitError`` naming the cause and the fix after this
    many consecutive training steps trained nothing (None: never); a run that trained before them stops early
    instead, evaluated and saved (``FitResult.stopped`` says why).
    ``eval_sampled``: when GRPO's evaluations (every ``eval_every`` steps) add the sampled (T=1) pass to the
    greedy one: ``"ends"`` (before the first step and after the last, the summary's before/after),
    ``"every"``, or ``"never"`` (greedy only, also in a warm start's evaluations: the cheapest).
    ``export``: send every rollout's spans to an OpenTelemetry collector as GenAI spans
    (``tether.OTLPExport(endpoint=...)``); None exports only when ``OTEL_TRACES_EXPORTER=otlp`` is set.
    ``report_to``: where ``fit`` sends its metrics besides ``metrics.jsonl``: ``"tensorboard"``, ``"wandb"``,
    ``"mlflow"`` or a list of them (``tether.training.run.report``; each needs its extra, e.g. ``tether[wandb]``).
    """

    model: str | ModelBackend = "embedded"
    algorithm: SupportsFit | Mapping[str, Any] | Sequence[Any] | None = None
    store: str | None = None
    n_runners: int = 4
    runners: RayRunners | None = None
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S
    credit: CreditRule = "episode"
    tool_error_penalty: float = 0.0
    gamma: float = 1.0
    sampling: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None
    steps: int = 20
    eval_every: int = 5
    eval_sampled: EvalSampled = "ends"
    seed: int = 0
    name: str | None = None
    run_root: str = "runs"
    progress: bool = True
    export: OTLPExport | None = None
    report_to: str | Sequence[str] | None = None
    stop_after_idle_steps: int | None = 3

    def __post_init__(self) -> None:
        if isinstance(self.model, str):
            check_model(self.model)  # threads, device, a URL's host: refused here, before anything loads
        Credit(self.credit, self.tool_error_penalty, self.gamma)  # a bad rule is refused here, not at fit
        check_report_to(self.report_to)
        check_idle_limit(self.stop_after_idle_steps)
        check_eval_sampled(self.eval_sampled)
        check_counts(
            {
                "steps": self.steps,
                "eval_every": self.eval_every,
                "n_runners": self.n_runners,
                "max_attempts": self.max_attempts,
                "timeout_s": self.timeout_s,
                "heartbeat_timeout_s": self.heartbeat_timeout_s,
            }
        )

    def dev(
        self,
        agent: WrappedAgent,
        tasks: Iterable[Any],
        *,
        model: str | ModelBackend | None = None,
        repeats: int = 1,
    ) -> DevReport:
        """Run each task ``repeats`` times, untrained, and report everything captured, with each call's
        advantage under this trainer's credit rule (the repeats of a task form its group: with one, only a
        rule that compares calls within a rollout gives non-zero advantages). Sync wrapper of ``adev``."""
        install_sigterm_flush()  # the spans of calls answered so far are written if the process is told to end
        return run_sync(self.adev(agent, tasks, model=model, repeats=repeats))

    async def adev(
        self,
        agent: WrappedAgent,
        tasks: Iterable[Any],
        *,
        model: str | ModelBackend | None = None,
        repeats: int = 1,
    ) -> DevReport:
        if not isinstance(agent, WrappedAgent):
            raise TypeError("Trainer.dev takes the result of tether.wrap(agent, ...)")
        items = list(tasks)
        if not items:
            raise ValueError("Trainer.dev needs at least one task")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
        if repeats > 1:  # a task's repeats share its id: they are its group
            items = [as_task(item) for item in items]
        unreachable = await agent.reward_problems()  # a judge that cannot answer, named before any rollout
        async with self.session(agent, model=model, trains=False) as session:
            batch = await session.run_batch(items, repeats, mode=Mode.VAL, harvest=False)
        out = report(batch, agent.optimize)
        out.problems[:0] = unreachable
        out.notes.extend(batch.credit.notes)
        zero = all_zero(out)
        if zero is not None:  # a note and a warning (not a wiring problem): a dev run is where it is cheap to see
            out.notes.append(zero)
            warnings.warn_explicit(zero, UserWarning, "tether.dev", 0)
        return out

    def evaluate(
        self, agent: WrappedAgent, tasks: Iterable[Any], *, model: str | ModelBackend | None = None
    ) -> dict[str, float]:
        """Metrics of one untrained pass over ``tasks``: mean reward, success rate, calls per rollout."""
        return self.dev(agent, tasks, model=model).metrics()

    def fit(
        self,
        agent: WrappedAgent,
        train: Sequence[Any],
        val: Sequence[Any] | None = None,
        *,
        resume: bool = False,
        preflight: bool = True,
    ) -> FitResult:
        """Train ``agent`` on ``train`` with the algorithm, evaluating on ``val``.

        Before step 1 a preflight runs the checks ``dev`` makes on a few training tasks
        (``tether.training.run.preflight``) and raises ``tether.FitError`` on a problem that would train nothing;
        ``preflight=False`` skips it. Ctrl-C stops after saving nothing half-written and returns a result with
        ``interrupted=True`` (its ``summary()`` says where the last checkpoint is); ``resume=True`` continues
        from that checkpoint.
        """
        algorithm, train_tasks, val_tasks, run = self._prepare(agent, train, val, resume)
        try:
            install_sigterm_flush()  # the spans of calls answered so far are written if the process is told to end
            return run_sync(self._fit(algorithm, agent, train_tasks, val_tasks, run, resume, preflight))
        except KeyboardInterrupt:
            checkpoint = run.checkpoint_path if run.state_path.exists() else None
            return FitResult(run_dir=run.path, history=run.history(), checkpoint=checkpoint, interrupted=True)

    async def afit(
        self,
        agent: WrappedAgent,
        train: Sequence[Any],
        val: Sequence[Any] | None = None,
        *,
        resume: bool = False,
        preflight: bool = True,
    ) -> FitResult:
        algorithm, train_tasks, val_tasks, run = self._prepare(agent, train, val, resume)
        return await self._fit(algorithm, agent, train_tasks, val_tasks, run, resume, preflight)

    def session(
        self,
        agent: WrappedAgent,
        *,
        model: str | ModelBackend | None = None,
        run: RunDir | None = None,
        resume: bool = False,
        before_start: Callable[[ModelBackend], None] | None = None,
        trains: bool = True,
    ) -> Session:
        """The ``Session`` that ``dev`` (no run folder, ``trains=False``) and ``fit`` (with one) open, with
        this trainer's settings; open it with ``async with``."""
        return Session(
            agent,
            model or self.model,
            store=self.store or (run.store_url if run is not None else "memory:"),
            run=run,
            settings=self.settings(),
            resume=resume,
            before_start=before_start,
            export=self.export or OTLPExport.from_env(),
            runners=self.runners,
            trains=trains,
        )

    def settings(self) -> Settings:
        """The settings an algorithm reads, as an immutable copy."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(Settings) if f.name not in _NOT_OWN}
        settings = Settings(
            **own,
            sampling=dict(self.sampling),
            scale_by_std=self._resolved_algorithm().scale_by_std if self.algorithm is not None else True,
        )
        settings.credit_rule  # noqa: B018 - checked: a bad rule is refused before anything runs
        return settings

    def _resolved_algorithm(self) -> Algorithm:
        """``algorithm`` as one ``tether.Algorithm``: a list becomes ``Stages``, a mapping ``Joint``, an object
        with only ``fit`` gets the contract's defaults; ``TypeError`` / ``ValueError`` naming the fix."""
        if self.algorithm is None:
            raise ValueError("Trainer.fit needs an algorithm: Trainer(algorithm=tether.GRPO(...))")
        from tether.algorithms.joint import Joint  # loads APO's modules: only when an algorithm is used
        from tether.algorithms.stages import Stages

        given: Any = self.algorithm
        if isinstance(given, list | tuple):  # stages in order, e.g. [tether.WarmStart(...), tether.GRPO(...)]
            return Stages(given)
        if isinstance(given, Mapping):
            return Joint(given)
        return check_algorithm(given)

    def _prepare(
        self, agent: WrappedAgent, train: Sequence[Any], val: Sequence[Any] | None, resume: bool
    ) -> tuple[Algorithm, list[Task], list[Task], RunDir]:
        """Check the arguments and decide the run folder, before anything runs."""
        algorithm = self._resolved_algorithm()
        if not isinstance(agent, WrappedAgent):
            raise TypeError("Trainer.fit takes the result of tether.wrap(agent, ...)")
        algorithm.check_agent(agent)  # before the run folder or anything else exists
        train_tasks = [as_task(t) for t in train]
        val_tasks = [as_task(t) for t in (val or [])]
        if not train_tasks and algorithm.uses_train_tasks:
            raise ValueError("Trainer.fit needs at least one training task")
        if resume and self.name is None:
            raise ValueError("resume=True needs the run's name: Trainer(name=...) as in the first run")
        run = RunDir.create(self.run_root, self.name or time.strftime("run-%Y%m%d-%H%M%S"))
        if not resume and run.metrics_path.exists():
            run.metrics_path.unlink()
        return algorithm, train_tasks, val_tasks, run

    async def _fit(
        self,
        algorithm: Algorithm,
        agent: WrappedAgent,
        train: list[Task],
        val: list[Task],
        run: RunDir,
        resume: bool,
        preflight: bool = True,
    ) -> FitResult:
        config = {"model": str(self.model), "algorithm": name_of(algorithm), "steps": self.steps}
        with reporting(self.report_to, run, config):
            # the algorithm may set the backend up before it starts (GRPO with LoRA attaches adapters)
            session = self.session(agent, run=run, resume=resume, before_start=algorithm.prepare_backend)
            await check_group_rewards(agent)  # an unreachable judge stops the run before anything starts
            if not algorithm.uses_session:  # (verl runs its own workers: no store, backend, proxy or runner)
                algorithm.check_session(session)
                return await algorithm.fit(session, train, val)
            async with session:
                algorithm.check_session(session)  # the algorithm's own refusals come first
                if preflight and not resume and train:
                    await run_preflight(session, algorithm, train)
                return await algorithm.fit(session, train, val)
