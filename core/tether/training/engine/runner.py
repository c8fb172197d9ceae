"""The runner: takes rollouts from the store and runs the wrapped agent on them.

For each rollout it opens an attempt (``dequeue``), opens it on the proxy (``proxy.attempt``, with the
sampling of the rollout's resources) and scopes the model endpoint to that attempt's URL (holding the openai
SDK's endpoint redirect, ``tether.capture.redirect``, when the SDK is installed); the agent's resources get an
endpoint at that URL (the runner alone decides it: a published resources version names none), enters every plugin's
``rollout_context``, runs the adapter (or the user's ``run=``), scores the output, and records the
outcome — output and reward, or the error with its traceback. A run past the rollout's
``timeout_s`` is cancelled and its attempt ends ``timeout`` through the store's own sweep
(``requeue_stale``), the way the attempt of a runner that died ends. Several rollouts run concurrently on one
event loop; a failing rollout never stops the runner.

Liveness: spans arriving in the store are an attempt's heartbeat, and the runner also heartbeats each attempt
it runs (a third of its ``heartbeat_timeout_s``, at most every ``HEARTBEAT_EVERY_S``), so a long model call is
not mistaken for a dead worker; an attempt of a worker that died stops beating and the store's sweep ends it
(``tether.types.DEFAULT_HEARTBEAT_TIMEOUT_S`` by default). ``run_until_idle`` sweeps before it calls the
queue empty, and returns only once every rollout it claimed has a recorded outcome (one it could not record,
the store failing, is waited for until the sweep ends it) and every rollout it was asked to wait for
has finished (a batch the trainer enqueued, some of it held by remote runners, one of which may die).

The runner's sink writes to the ``SpanBatcher`` it is given, the one the proxy writes to: the store numbers
spans in arrival order, so a single queue keeps an LLM call before the tool call it requested. The runner
flushes it before it ends each attempt and never closes it (its creator does, after the proxy stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from tether import spans
from tether._json import jsonable
from tether._seeds import derive_seed
from tether.capture import redirect
from tether.capture.context import RolloutScope, current_sink, rollout_scope
from tether.capture.emit import record_final_rewards
from tether.capture.sink import RolloutSink
from tether.plugin.adapters import Tracer
from tether.plugin.manager import get_plugins
from tether.plugin.wrap import WrappedAgent
from tether.proxy import system_messages
from tether.rewards.base import Member
from tether.store.errors import InvalidTransition, NotFound, StoreError
from tether.store.retry import DEFAULT_OUTAGE_S, retry_outage
from tether.types import Attempt, AttemptStatus, LLMEndpoint, Resources, Rollout, SpanKind

if TYPE_CHECKING:
    from tether.capture.span_batcher import SpanBatcher
    from tether.proxy import ProxyServer
    from tether.store import Store
    from tether.training.engine.group_gate import GroupGate

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 30.0  # the longest wait between two heartbeats of an attempt the runner runs
_WAIT_S = 0.1  # how often an idle run_until_idle asks the store about rollouts it waits for
_WARN_EVERY_S = 5.0


@dataclass(slots=True)
class RunnerStats:
    succeeded: int = 0
    failed: int = 0


@dataclass(eq=False)
class Runner:
    """Runs rollouts of one wrapped agent from ``store``, at most ``concurrency`` at a time, their model
    calls served by ``proxy``; adapters' spans go to ``batcher`` (the proxy's). A store that fails (busy,
    briefly unreachable) is retried; one that refuses every ``dequeue`` for ``store_patience_s`` stops it. Ending
    an attempt is retried while the store fails, for up to ``outage_s`` (60 s), so a short outage does not turn
    finished work into failures.

    Use as an async context manager (it instruments the adapter and tracers on enter and removes them on
    exit), then ``await run_until_idle()`` or ``await serve(stop_event)``.
    """

    agent: WrappedAgent
    store: Store
    proxy: ProxyServer
    _: KW_ONLY
    batcher: SpanBatcher
    concurrency: int = 4
    worker_id: str = field(default_factory=lambda: f"runner-{uuid.uuid4().hex[:8]}")
    poll_s: float = 0.02
    store_patience_s: float = 30.0  # how long a store that refuses every dequeue is retried
    outage_s: float = DEFAULT_OUTAGE_S  # how long ending an attempt is retried while the store fails
    #: where a group reward's rollouts wait for their group (``tether.training.engine.group_gate``)
    gate: GroupGate | None = None
    stats: RunnerStats = field(default_factory=RunnerStats, init=False)
    sink: RolloutSink | None = field(default=None, init=False)
    _parked: int = field(default=0, init=False)  # rollouts waiting at the gate: they hold no runner slot
    _instrumented: list[Tracer] = field(default_factory=list, init=False)
    #: attempts running here: attempt id -> (seconds between heartbeats, monotonic time of the last one)
    _beats: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)
    #: attempts whose outcome the store did not take (it failed): attempt id -> rollout id
    _unrecorded: dict[str, str] = field(default_factory=dict, init=False)
    _warned: dict[str, float] = field(default_factory=dict, init=False)  # kind of store failure -> last logged

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    async def __aenter__(self) -> Runner:
        self.sink = RolloutSink(self.batcher, asyncio.get_running_loop())
        for tracer in [self.agent.adapter, *get_plugins().tracers()]:
            tracer.instrument(self.sink)
            self._instrumented.append(tracer)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for tracer in reversed(self._instrumented):
            tracer.uninstrument()
        self._instrumented.clear()
        if self.sink is not None:
            await self.sink.flush()  # its creator closes the batcher

    async def run_until_idle(self, rollout_ids: Sequence[str] | None = None) -> RunnerStats:
        """Run rollouts until none is queued (stale attempts swept first), none is in flight here, every
        rollout this runner claimed has its outcome recorded, and every rollout in ``rollout_ids`` has
        finished: one held by a worker that died is swept once its heartbeat is stale and then runs here."""
        return await self._loop(stop=None, wait_for=rollout_ids)

    async def serve(self, stop: asyncio.Event) -> RunnerStats:
        """Run rollouts, waiting for new ones, until ``stop`` is set (in-flight rollouts finish first)."""
        return await self._loop(stop=stop)

    async def _loop(self, stop: asyncio.Event | None, wait_for: Sequence[str] | None = None) -> RunnerStats:
        if self.sink is None:
            raise RuntimeError("use the Runner as an async context manager: async with Runner(...) as r")
        running: set[asyncio.Task[None]] = set()
        waiting = list(dict.fromkeys(wait_for or ()))
        failing_since: float | None = None  # when the store began refusing dequeue, if it does
        ended = [0]  # rollouts run here that have ended: one that failed may be queued again

        def done(task: asyncio.Task[None]) -> None:
            running.discard(task)
            ended[0] += 1

        while True:
            free = self.concurrency - len(running) + self._parked
            ended_before = ended[0]
            try:
                claimed = await self.store.dequeue(self.worker_id, limit=free) if free > 0 else []
                failing_since = None
            except StoreError as exc:  # busy or briefly unreachable: the rollouts in flight go on meanwhile
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.store_patience_s:
                    raise
                self._warn(
                    "dequeue", "could not dequeue (retrying for up to %g s): %s", self.store_patience_s, exc
                )
                claimed = []
            for rollout, attempt in claimed:
                self._beats[attempt.attempt_id] = (_beat_every(rollout), time.monotonic())
                task = asyncio.create_task(self._run_one(rollout, attempt))
                running.add(task)
                task.add_done_callback(done)
            if not claimed:
                if stop is not None and stop.is_set():
                    if running:
                        await asyncio.gather(*running, return_exceptions=True)
                    return self.stats
                await self._heartbeat()  # before the sweep: never sweep an attempt of our own that is alive
                swept = await self._sweep()
                if running:
                    await asyncio.wait(running, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
                elif swept:
                    continue  # requeued: claim them now
                elif ended[0] != ended_before:
                    continue  # a rollout ended since the queue was looked at (and may be in it again)
                elif stop is None:
                    if await self._settled(waiting) and ended[0] == ended_before:
                        return self.stats
                    await asyncio.sleep(max(self.poll_s, _WAIT_S))
                else:
                    await asyncio.sleep(self.poll_s)

    async def _heartbeat(self) -> None:
        """Heartbeat the attempts running here that are due one."""
        now = time.monotonic()
        for attempt_id, (every, last) in list(self._beats.items()):
            if now - last < every:
                continue
            self._beats[attempt_id] = (every, now)
            try:
                await self.store.heartbeat(attempt_id)
            except (InvalidTransition, NotFound):  # it ended meanwhile (cancelled, or swept): the run will see
                pass
            except StoreError as exc:
                self._warn("heartbeat", "could not heartbeat attempt %s: %s", attempt_id, exc)

    def _warn(self, what: str, message: str, *args: object) -> None:
        """Log a store failure at most every ``_WARN_EVERY_S`` per kind (the loop retries every poll)."""
        now = time.monotonic()
        if now - self._warned.get(what, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned[what] = now
            log.warning(message, *args)

    async def _sweep(self) -> list[str]:
        try:
            return await self.store.requeue_stale()
        except StoreError as exc:  # a busy or briefly unreachable store: the next turn sweeps
            self._warn("sweep", "could not sweep stale attempts: %s", exc)
            return []

    async def _settled(self, waiting: list[str]) -> bool:
        """Whether every attempt whose outcome this runner could not record has ended in the store (swept)
        and every rollout in ``waiting`` has finished (``waiting`` keeps the unfinished ones)."""
        try:
            for attempt_id, rollout_id in list(self._unrecorded.items()):
                try:
                    attempts = await self.store.get_attempts(rollout_id)
                except NotFound:  # harvested: certainly ended
                    attempts = []
                if not any(a.attempt_id == attempt_id and a.status == AttemptStatus.RUNNING for a in attempts):
                    del self._unrecorded[attempt_id]
            if waiting:
                unfinished = await self.store.list_rollouts(rollout_ids=waiting)  # (harvested ones are left out)
                waiting[:] = [r.rollout_id for r in unfinished if not r.status.finished]
        except StoreError as exc:
            self._warn("settled", "could not check on the rollouts run_until_idle waits for: %s", exc)
            return False
        return not self._unrecorded and not waiting

    async def _run_one(self, rollout: Rollout, attempt: Attempt) -> None:
        assert self.sink is not None
        rollout_id, attempt_id = rollout.rollout_id, attempt.attempt_id
        sink_token = current_sink.set(self.sink)
        deadline = asyncio.timeout(rollout.timeout_s)  # no limit when timeout_s is None
        try:
            published = await self._resources_for(rollout)
            sampling = published.llm.sampling if published.llm is not None else {}
            # the sampling travels once: the rollout's resources -> the proxy's attempt, applied to each call
            # and the system messages its resources swap in (tether.proxy.system_messages: APO's in-flight
            # candidates)
            replacements = system_messages.rule_of(published.prompts)
            async with self.proxy.attempt(
                rollout_id, attempt_id, _sampling(rollout, attempt, sampling), replacements
            ) as base_url:
                resources = _with_endpoint(published, base_url)  # the one place a rollout's URL is set
                with rollout_scope(RolloutScope(rollout_id, attempt_id, base_url, self.proxy.token)):
                    async with contextlib.AsyncExitStack() as stack:
                        stack.enter_context(redirect.held())  # the SDK's requests reach this attempt's URL
                        for manager in get_plugins().rollout_contexts(rollout):
                            await stack.enter_async_context(manager)
                        async with deadline:
                            output = await self.agent.run_task(rollout.input, resources)
                        # still in the scope: a judge in reward= is recorded (tether.passthrough), not redirected
                        score: float | dict[str, float] | None
                        if self.agent.group_rewards:
                            score = await self._score_in_group(rollout, attempt_id, output)
                        else:
                            score = await self.agent.score(rollout.input, output)
                        # {sub-agent or policy: reward}: recorded as final reward spans; the mean is the reward
                        reward = record_final_rewards(score) if isinstance(score, dict) else score
            emitted = self.sink.pop_rewards(attempt_id)
            if reward is None and emitted:
                reward = sum(emitted)
            await self.sink.flush()
            await self._finish(
                rollout_id, attempt_id, AttemptStatus.SUCCEEDED, output=jsonable(output), reward=reward
            )
            self.stats.succeeded += 1
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            # an agent's SystemExit (a tool calling exit()), KeyboardInterrupt or GeneratorExit fails its rollout
            # and goes no further: raised out of this task it would stop tether's event loop (tether._loop)
            self.sink.pop_rewards(attempt_id)
            if isinstance(exc, TimeoutError) and deadline.expired():
                error = f"attempt timed out after {rollout.timeout_s:g} s"
                log.info("rollout %s attempt %s: %s", rollout_id, attempt_id, error)
            else:
                error = format_error(exc)
                log.info("rollout %s attempt %s failed: %s", rollout_id, attempt_id, exc)
            try:
                await self.sink.flush()
                if deadline.expired():
                    # the store's sweep ends it as `timeout` (and requeues or fails the rollout) exactly as it
                    # would for a runner that died, so both ways to notice a timeout end the same
                    await self.store.requeue_stale()
                await self._finish(rollout_id, attempt_id, AttemptStatus.FAILED, error=error)
            except InvalidTransition:  # already ended: the sweep timed it out, or the rollout was cancelled
                log.debug("attempt %s had already ended", attempt_id)
            except Exception:  # the store itself failed: the attempt stays running until the sweep ends it
                log.exception("could not record the failure of attempt %s", attempt_id)
                self._unrecorded[attempt_id] = rollout_id
            self.stats.failed += 1
        finally:
            self._beats.pop(attempt_id, None)
            current_sink.reset(sink_token)

    async def _score_in_group(self, rollout: Rollout, attempt_id: str, output: Any) -> float | dict[str, float]:
        """The reward of a ``reward=`` with group rewards: its functions' values now, its group rewards' once
        the rollout's group has met at the gate (the rollout parked meanwhile), each score recorded as a reward
        span with its reason."""
        plan, gate, sink = self.agent.plan, self.gate, self.sink
        if plan is None or gate is None or sink is None:
            raise RuntimeError("group rewards need the session's group gate (tether.training.engine.group_gate)")
        values = await self.agent.score_functions(rollout.input, output)
        await sink.flush()  # what the judge reads: every span of the attempt so far
        member = Member(rollout.rollout_id, output, tuple(await self.store.get_spans(attempt_id)))
        key = rollout.metadata.get(spans.GROUP_METADATA) if isinstance(rollout.metadata, dict) else None
        self._parked += 1
        try:
            scores = await gate.arrive(str(key or rollout.rollout_id), rollout.input, member)
        finally:
            self._parked -= 1
        for index, score in sorted(scores.items()):
            term = plan.terms[index]
            extra: dict[str, Any] = {spans.REWARD_FINAL: True, spans.REWARD_REASON: score.reason, **score.details}
            if term.weight != 1.0:
                extra[spans.REWARD_WEIGHT] = term.weight
            if term.target is not None:
                extra[spans.REWARD_PART_OF] = term.target
            name = getattr(term.part, "name", spans.REWARD)
            sink.emit(SpanKind.REWARD, name, spans.reward_attributes(score.value, **extra))
        return plan.combine(values, scores)

    async def _finish(self, rollout_id: str, attempt_id: str, status: AttemptStatus, **fields: Any) -> None:
        """End the attempt, riding out a store outage (``tether.store.retry``); a retry that finds the attempt
        already ended as asked (the first call landed, its answer was lost) is done, not an error."""
        tries = 0

        async def finish() -> None:
            nonlocal tries
            tries += 1
            try:
                await self.store.finish_attempt(attempt_id, status, **fields)
            except InvalidTransition:
                if tries == 1:
                    raise
                attempts = await self.store.get_attempts(rollout_id)
                if not any(a.attempt_id == attempt_id and a.status == status for a in attempts):
                    raise

        await retry_outage(finish, f"ending attempt {attempt_id}", self.outage_s)

    async def _resources_for(self, rollout: Rollout) -> Resources:
        """The resources version the rollout runs under (an empty one when the store has none)."""
        resources = await self.store.get_resources(rollout.resources_version)
        return resources if resources is not None else Resources(version=0)


def _with_endpoint(published: Resources, base_url: str) -> Resources:
    """What the agent of one attempt gets: the published version with an endpoint at the attempt's URL (a
    published version names none: ``Session.publish``)."""
    llm = published.llm or LLMEndpoint()
    endpoint = LLMEndpoint(base_url=base_url, model=llm.model, sampling=dict(llm.sampling))
    return Resources(published.version, endpoint, published.prompts, published.created_at)


def _sampling(rollout: Rollout, attempt: Attempt, sampling: dict[str, Any]) -> dict[str, Any]:
    """The attempt's sampling: the resources' with, in a seeded run, the attempt's own seed (from the rollout's
    and the attempt's index: a retry samples afresh, the same way in every run)."""
    seed = rollout.metadata.get(spans.SEED_METADATA) if isinstance(rollout.metadata, dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool):
        return sampling
    return {**sampling, "seed": derive_seed(seed, attempt.index)}


def _beat_every(rollout: Rollout) -> float:
    """Seconds between the runner's heartbeats of an attempt of ``rollout``."""
    limit = rollout.heartbeat_timeout_s
    return HEARTBEAT_EVERY_S if limit is None else min(limit / 3, HEARTBEAT_EVERY_S)


def format_error(exc: BaseException) -> str:
    """``exc``'s traceback, its notes first: a framework's note on the exception (LangGraph's "During task with
    name 'model' and id ...") would otherwise be its last line, where summaries read the error."""
    formatted = traceback.TracebackException.from_exception(exc)
    notes = [str(note) for note in formatted.__notes__ or ()]
    formatted.__notes__ = None
    return ("".join(note + "\n" for note in notes) + "".join(formatted.format())).strip()
