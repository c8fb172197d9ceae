"""The Session: what an algorithm runs rollouts with, open for one ``dev`` / ``evaluate`` / ``fit`` call.

``Trainer`` opens it (``async with Session(...)``): the store, the model backend, the span batcher, the proxy
that serves the backend and records each call, the runner that runs the wrapped agent, and the run folder
(None for ``dev``), with the trainer's settings. An algorithm (``tether.algorithms.base.Algorithm``) gets it
in ``fit(session, train, val)`` and runs batches of rollouts with ``run_batch``: one resources version is
published (the sampling, and prompts if given), the tasks are enqueued, run and read back from the store (where
they stay, for the dashboard; a failed one's error also goes to the run folder's ``failures.jsonl``), and the
transitions of each rollout's last attempt are built. ``run_jobs`` runs several resources versions in one
batch, concurrently (APO scores its prompt candidates that way).

What the session opens, in order, and how it closes is in ``tether.training.engine._session_parts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether import _json, spans
from tether._seeds import derive_seed
from tether.models.base import ModelBackend
from tether.store import Store, StoreError
from tether.store.base import Harvested
from tether.training.engine._results import rollout_result
from tether.training.engine._session_parts import Parts, open_parts
from tether.training.run.health import (
    FAILURES_FILE,
    FitError,
    log_failures,
)
from tether.training.run.run_dir import RunDir
from tether.training.run.settings import Settings
from tether.training.signal.batch import Batch, Job, RolloutResult
from tether.training.signal.credit import assign_credit
from tether.types import (
    LLMEndpoint,
    Mode,
    PromptTemplate,
    RolloutSpec,
    RolloutStatus,
    Task,
)

if TYPE_CHECKING:
    from tether.capture.span_batcher import SpanBatcher
    from tether.otel.export import OTLPExport, SpanExporter
    from tether.plugin.wrap import WrappedAgent
    from tether.proxy import ProxyServer
    from tether.training.engine.ray_runners import RayPool, RayRunners
    from tether.training.engine.runner import Runner


#: the rollout metadata key that says which part of a run a rollout belongs to (``"preflight"``)
PHASE_METADATA = "tether.phase"
#: how often a run with a ``progress`` callback asks the store how many of its rollouts have finished
WATCH_INTERVAL_S = 1.0


def as_task(item: Any) -> Task:
    """A ``Task`` for a dataset item; raw inputs get a stable id from their content."""
    if isinstance(item, Task):
        return item
    digest = hashlib.sha1(_json.dumps(item)).hexdigest()[:12]
    return Task(input=item, task_id=f"task-{digest}")


class Session:
    """The store, backend, proxy, runner and run folder of one call, opened by ``async with``.

    ``model`` is a ``model=`` string (the session opens and closes the backend) or a ``ModelBackend`` (it
    stays open: its owner closes it). ``store`` is a store URL. ``resume`` says that ``fit`` continues the run
    in ``run`` (an algorithm with checkpoints reads them back). ``before_start(backend)`` runs before the
    backend starts (``Trainer.fit`` passes the algorithm's ``prepare_backend``: GRPO attaches LoRA adapters).
    ``export`` sends every finished rollout's spans out as OpenTelemetry GenAI spans (``tether.OTLPExport``).
    ``runners`` (``tether.RayRunners``) runs the rollouts in Ray actors instead of this process.
    ``trains=False`` (``dev``) runs a policy map on a backend that cannot hold policies: every call goes to its
    one model, and each call still shows the policy it would train.
    """

    def __init__(
        self,
        agent: WrappedAgent,
        model: str | ModelBackend,
        *,
        store: str = "memory:",
        run: RunDir | None = None,
        settings: Settings | None = None,
        resume: bool = False,
        before_start: Callable[[ModelBackend], None] | None = None,
        export: OTLPExport | None = None,
        runners: RayRunners | None = None,
        trains: bool = True,
    ) -> None:
        self.agent = agent
        self.trains = trains
        self.model = model
        self.store_url = store
        self.run = run
        self.settings = settings or Settings()
        self.resume = resume
        self.before_start = before_start
        self.export = export
        self.runners = runners
        self._exporter: SpanExporter | None = None
        self._parts: Parts | None = None
        self._batches = 0  # batches run: part of each rollout's seed
        #: whether the run's one ``optimize=`` check ran (``check_optimize_names``: the preflight's; else the
        #: first training batch's)
        self.names_checked = False
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def __aenter__(self) -> Session:
        stack = contextlib.AsyncExitStack()
        try:
            if self.export is not None:
                exporter = self._exporter = self.export.start()
                stack.push_async_callback(asyncio.to_thread, exporter.close)  # last out: sends what is queued
            self._parts = await open_parts(
                stack,
                agent=self.agent,
                model=self.model,
                store_url=self.store_url,
                trains=self.trains,
                before_start=self.before_start,
                runners=self.runners,
                n_runners=self.settings.n_runners,
                cache_dir=self.run.path if self.run is not None else None,
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack, self._parts = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    @property
    def _open(self) -> Parts:
        if self._parts is None:
            raise RuntimeError("the session is not open: use it as `async with Session(...) as session:`")
        return self._parts

    @property
    def store(self) -> Store:
        return self._open.store

    @property
    def backend(self) -> ModelBackend:
        return self._open.backend

    @property
    def batcher(self) -> SpanBatcher:
        return self._open.batcher

    @property
    def proxy(self) -> ProxyServer:
        return self._open.proxy

    @property
    def runner(self) -> Runner | RayPool:
        return self._open.runner

    def require_run(self, who: str) -> RunDir:
        """The run folder; ``RuntimeError`` naming ``who`` when the session has none (``dev``)."""
        if self.run is None:
            raise RuntimeError(f"{who} needs a run folder: run it through Trainer.fit")
        return self.run

    # -- batches --------------------------------------------------------------------------------------------

    async def publish(
        self, sampling: Mapping[str, Any] | None = None, prompts: dict[str, PromptTemplate] | None = None
    ) -> int:
        """Publish a resources version: the trainer's sampling updated by ``sampling``, and ``prompts`` (the
        latest ones when None). Returns its version. It names no URL: the runner gives each rollout its
        attempt's (``tether.training.engine.runner``)."""
        llm = LLMEndpoint(sampling={**self.settings.sampling, **(sampling or {})})
        resources = await self.store.add_resources(llm=llm, prompts=prompts)
        return resources.version

    async def run_batch(
        self,
        tasks: Sequence[Any],
        repeats: int = 1,
        sampling: Mapping[str, Any] | None = None,
        mode: Mode = Mode.TRAIN,
        *,
        prompts: dict[str, PromptTemplate] | None = None,
        harvest: bool = False,
        metadata: Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Batch:
        """Run each task ``repeats`` times with ``sampling`` (and ``prompts``) and return the batch.

        ``tasks`` are ``Task`` objects or raw inputs; ``metadata`` is added to each rollout's. The rollouts stay
        in the store (a ``memory:`` store keeps the latest ``keep_rollouts``); ``harvest=True`` removes them.
        ``progress(finished, total)`` is called as the rollouts finish (the store polled each second).
        """
        started = time.perf_counter()
        version = await self.publish(sampling, prompts)
        job = Job(tasks, version, repeats, metadata or {})
        (batch,) = await self._run([job], mode, harvest, started, progress)
        return batch

    async def run_jobs(
        self,
        jobs: Sequence[Job],
        mode: Mode = Mode.TRAIN,
        *,
        harvest: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Batch]:
        """Run every job's rollouts together (enqueued in job order) and return one batch per job.
        ``progress(finished, total)`` is called as the rollouts finish (the store polled each second)."""
        return await self._run(jobs, mode, harvest, time.perf_counter(), progress)

    async def _run(
        self,
        jobs: Sequence[Job],
        mode: Mode,
        harvest: bool,
        started: float,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Batch]:
        self._batches += 1  # (seeds differ between batches: a task's rollouts at step 2 are not step 1's)
        specs = [
            self._spec(task, mode, job.resources_version, job.metadata, (self._batches, repeat))
            for job in jobs
            for task in job.tasks
            for repeat in range(job.repeats)
        ]
        enqueued = await self.store.enqueue(specs)
        ids = [r.rollout_id for r in enqueued]
        groups = _groups(enqueued)
        gate = self._open.gate
        if gate is not None:
            for key, members in groups.items():
                gate.expect(key, members)
        watch = asyncio.create_task(self._watch(ids, progress)) if progress is not None else None
        try:
            await self.runner.run_until_idle(ids)  # (remote runners may hold some: wait for those too)
        finally:
            if gate is not None:
                gate.forget(list(groups))
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
        if progress is not None:
            progress(len(ids), len(ids))
        group_metrics, group_notes = gate.take_batch() if gate is not None else ({}, [])
        if gate is not None and gate.failure is not None and self.run is not None:
            failure, gate.failure = gate.failure, None
            raise FitError(f"the group reward failed, so this step stops: {failure}") from failure
        items = await self.store.harvest(ids) if harvest else await self._read(ids)
        if self._exporter is not None:
            self._exporter.export(items)
        by_id = {item.rollout.rollout_id: item for item in items}
        if len(by_id) < len(ids):
            raise StoreError(
                f"{len(ids) - len(by_id)} of the batch's {len(ids)} rollouts left the store before they were "
                "read: raise the memory store's keep_rollouts (memory:?keep_rollouts=N) above the batch size"
            )

        batches: list[Batch] = []
        position = 0
        for job in jobs:
            count = len(job.tasks) * job.repeats
            batches.append(Batch([self._result(by_id[i]) for i in ids[position : position + count]]))
            position += count
            if self.run is not None:  # every failure kept, whatever the algorithm does with the batch
                phase = job.metadata.get(PHASE_METADATA)
                log_failures(self.run.path / FAILURES_FILE, batches[-1].rollouts, str(phase) if phase else None)
        seconds = time.perf_counter() - started
        for i, batch in enumerate(batches):
            batch.seconds = seconds
            batch.trained, batch.credit = assign_credit(batch.results, self.settings.credit_rule)  # (recorded)
            batch.credit.notes.extend(group_notes)
            # the group reward's figures are of all the jobs run together: on the first batch only, so that a
            # sum over the batches (an evaluation's two passes) counts each judge call once
            batch.group_metrics = dict(group_metrics) if i == 0 else {}
        return batches

    async def _watch(self, ids: Sequence[str], progress: Callable[[int, int], None]) -> None:
        """Call ``progress(finished, total)`` each second until cancelled (a store that cannot answer now is
        asked again the next second)."""
        while True:
            with contextlib.suppress(StoreError):
                rollouts = await self.store.list_rollouts(rollout_ids=ids)
                progress(sum(1 for r in rollouts if r.status.finished), len(ids))
            await asyncio.sleep(WATCH_INTERVAL_S)

    def _spec(
        self, task: Any, mode: Mode, version: int, metadata: Mapping[str, Any], place: tuple[int, int] = (0, 0)
    ) -> RolloutSpec:
        """The one place a rollout of a task is specified; ``place`` is (batch, repeat), what its seed
        derives from with the run seed and the task (never the order rollouts run in)."""
        known = isinstance(task, Task)
        meta = {**task.metadata, **metadata} if known else dict(metadata)
        meta[spans.SEED_METADATA] = derive_seed(self.settings.seed, *place, task.task_id if known else _key(task))
        # what training builds and credits this rollout's transitions with, for the dashboard to do the same
        meta[spans.POLICIES_METADATA] = self.agent.policies.to_metadata()
        meta[spans.CREDIT_METADATA] = self.settings.credit_rule.to_metadata()
        if self.agent.group_rewards:  # a group: one task's rollouts under one resources version in one batch
            who = task.task_id if known else hashlib.sha1(_key(task).encode()).hexdigest()[:12]
            meta[spans.GROUP_METADATA] = f"{place[0]}:{version}:{who}"
        return RolloutSpec(
            input=task.input if known else task,
            task_id=task.task_id if known else None,
            mode=mode,
            metadata=meta,
            max_attempts=self.settings.max_attempts,
            timeout_s=self.settings.timeout_s,
            heartbeat_timeout_s=self.settings.heartbeat_timeout_s,
            resources_version=version,
        )

    async def _read(self, rollout_ids: Sequence[str]) -> list[Harvested]:
        """The rollouts with their attempts and spans (every attempt's when exporting, else the last's), left
        in the store."""
        out = []
        for rollout in await self.store.list_rollouts(rollout_ids=rollout_ids):
            attempts = await self.store.get_attempts(rollout.rollout_id)
            wanted = attempts if self._exporter is not None else attempts[-1:]
            found = [s for a in wanted for s in await self.store.get_spans(a.attempt_id)]
            out.append(Harvested(rollout, attempts, found))
        return out

    def _result(self, item: Harvested) -> RolloutResult:
        return rollout_result(item, self.agent)

    # -- other store work algorithms share ------------------------------------------------------------------

    async def cancel_unfinished(self) -> int:
        """Cancel the rollouts an interrupted run left queued or running; returns how many."""
        cancelled = 0
        for status in (RolloutStatus.QUEUED, RolloutStatus.RUNNING):
            for stale in await self.store.list_rollouts(status=status):
                await self.store.cancel_rollout(stale.rollout_id)
                cancelled += 1
        return cancelled

    async def open_record(self, algorithm: str) -> tuple[str, str]:
        """A rollout that holds ``algorithm``'s records as spans: claimed here, never run by a runner. Returns
        its rollout and attempt ids; finish the attempt when the records are complete."""
        (rollout,) = await self.store.enqueue(
            [
                RolloutSpec(
                    input={"algorithm": algorithm},
                    task_id=f"{spans.RECORD_METADATA}:{algorithm}",  # the dashboard finds it by this (indexed)
                    mode=Mode.VAL,
                    metadata={spans.RECORD_METADATA: algorithm},
                    heartbeat_timeout_s=None,  # no worker runs it: never swept as a dead worker's
                )
            ]
        )
        claimed = await self.store.dequeue(f"{algorithm}-history", limit=1)
        if not claimed or claimed[0][0].rollout_id != rollout.rollout_id:
            raise StoreError(
                f"another worker took {algorithm}'s history record: stop remote runners while it starts"
            )
        return rollout.rollout_id, claimed[0][1].attempt_id


def _groups(rollouts: Sequence[Any]) -> dict[str, list[str]]:
    """The rollout ids of each group key (``spans.GROUP_METADATA``)."""
    out: dict[str, list[str]] = {}
    for rollout in rollouts:
        key = rollout.metadata.get(spans.GROUP_METADATA) if isinstance(rollout.metadata, dict) else None
        out.setdefault(str(key or rollout.rollout_id), []).append(rollout.rollout_id)
    return out


def _key(task: Any) -> str:
    """A raw task's identity for its seed: its JSON, else its repr."""
    try:
        return _json.dumps(task).decode()
    except TypeError:
        return repr(task)
