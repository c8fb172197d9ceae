"""The runner: takes rollouts from the store and runs the wrapped agent on them.

For each rollout it opens an attempt (``dequeue``), opens it on the proxy (``proxy.attempt``, with the
sampling of the rollout's resources) and scopes the model endpoint to that attempt's URL (holding the openai
SDK's endpoint redirect, ``tether.redirect``, when the SDK is installed), enters every plugin's
``rollout_context``, runs the adapter (or the user's ``run=``), scores the output, and records the
outcome — output and reward, or the error with its traceback. A run past the rollout's
``timeout_s`` is cancelled and its attempt ends ``timeout`` through the store's own sweep
(``requeue_stale``), the way the attempt of a runner that died ends. Several rollouts run concurrently on one
event loop; a failing rollout never stops the runner. Spans arriving in the store are the attempt's
heartbeat.

The runner's sink writes to the ``SpanBatcher`` it is given, the one the proxy writes to: the store numbers
spans in arrival order, so a single queue keeps an LLM call before the tool call it requested. The runner
flushes it before it ends each attempt and never closes it (its creator does, after the proxy stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether import redirect
from tether._json import jsonable
from tether.adapters import Tracer
from tether.context import RolloutScope, current_sink, rollout_scope
from tether.plugins import get_plugins
from tether.sink import RolloutSink
from tether.store.base import InvalidTransition
from tether.types import Attempt, AttemptStatus, LLMEndpoint, Resources, Rollout
from tether.wrap import WrappedAgent

if TYPE_CHECKING:
    from tether.proxy import ProxyServer
    from tether.span_batcher import SpanBatcher
    from tether.store import Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunnerStats:
    succeeded: int = 0
    failed: int = 0


class Runner:
    """Runs rollouts of one wrapped agent from ``store``, at most ``concurrency`` at a time, their model
    calls served by ``proxy``; adapters' spans go to ``batcher`` (the proxy's).

    Use as an async context manager (it instruments the adapter and tracers on enter and removes them on
    exit), then ``await run_until_idle()`` or ``await serve(stop_event)``.
    """

    def __init__(
        self,
        agent: WrappedAgent,
        store: Store,
        proxy: ProxyServer,
        *,
        batcher: SpanBatcher,
        concurrency: int = 4,
        worker_id: str | None = None,
        poll_s: float = 0.02,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.agent = agent
        self.store = store
        self.proxy = proxy
        self.batcher = batcher
        self.concurrency = concurrency
        self.worker_id = worker_id or f"runner-{uuid.uuid4().hex[:8]}"
        self.poll_s = poll_s
        self.stats = RunnerStats()
        self.sink: RolloutSink | None = None
        self._instrumented: list[Tracer] = []

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

    async def run_until_idle(self) -> RunnerStats:
        """Run rollouts until the queue is empty and none is in flight."""
        return await self._loop(stop=None)

    async def serve(self, stop: asyncio.Event) -> RunnerStats:
        """Run rollouts, waiting for new ones, until ``stop`` is set (in-flight rollouts finish first)."""
        return await self._loop(stop=stop)

    async def _loop(self, stop: asyncio.Event | None) -> RunnerStats:
        if self.sink is None:
            raise RuntimeError("use the Runner as an async context manager: async with Runner(...) as r")
        running: set[asyncio.Task[None]] = set()
        while True:
            free = self.concurrency - len(running)
            claimed = await self.store.dequeue(self.worker_id, limit=free) if free > 0 else []
            for rollout, attempt in claimed:
                task = asyncio.create_task(self._run_one(rollout, attempt))
                running.add(task)
                task.add_done_callback(running.discard)
            if not claimed:
                if stop is None and not running:
                    return self.stats
                if stop is not None and stop.is_set():
                    if running:
                        await asyncio.gather(*running, return_exceptions=True)
                    return self.stats
                await self.store.requeue_stale()
                if running:
                    await asyncio.wait(running, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.sleep(self.poll_s)

    async def _run_one(self, rollout: Rollout, attempt: Attempt) -> None:
        assert self.sink is not None
        rollout_id, attempt_id = rollout.rollout_id, attempt.attempt_id
        sink_token = current_sink.set(self.sink)
        deadline = asyncio.timeout(rollout.timeout_s)  # no limit when timeout_s is None
        try:
            resources = await self._resources_for(rollout)
            assert resources.llm is not None
            # the sampling travels once: the rollout's resources -> the proxy's attempt, applied to each call
            async with self.proxy.attempt(rollout_id, attempt_id, resources.llm.sampling) as base_url:
                resources.llm.base_url = base_url
                with rollout_scope(RolloutScope(rollout_id, attempt_id, base_url)):
                    async with contextlib.AsyncExitStack() as stack:
                        stack.enter_context(redirect.held())  # the SDK's requests reach this attempt's URL
                        for manager in get_plugins().rollout_contexts(rollout):
                            await stack.enter_async_context(manager)
                        async with deadline:
                            output = await self.agent.run_task(rollout.input, resources)
                        # still in the scope: a judge in reward= is recorded (tether.passthrough), not redirected
                        reward = await self.agent.score(rollout.input, output)
            emitted = self.sink.pop_rewards(attempt_id)
            if reward is None and emitted:
                reward = sum(emitted)
            await self.sink.flush()
            await self.store.finish_attempt(
                attempt_id, AttemptStatus.SUCCEEDED, output=jsonable(output), reward=reward
            )
            self.stats.succeeded += 1
        except Exception as exc:
            self.sink.pop_rewards(attempt_id)
            if isinstance(exc, TimeoutError) and deadline.expired():
                error = f"attempt timed out after {rollout.timeout_s:g} s"
                log.info("rollout %s attempt %s: %s", rollout_id, attempt_id, error)
            else:
                error = "".join(traceback.format_exception(exc)).strip()
                log.info("rollout %s attempt %s failed: %s", rollout_id, attempt_id, exc)
            try:
                await self.sink.flush()
                if deadline.expired():
                    # the store's sweep ends it as `timeout` (and requeues or fails the rollout) exactly as it
                    # would for a runner that died, so both ways to notice a timeout end the same
                    await self.store.requeue_stale()
                await self.store.finish_attempt(attempt_id, AttemptStatus.FAILED, error=error)
            except InvalidTransition:  # already ended: the sweep timed it out, or the rollout was cancelled
                log.debug("attempt %s had already ended", attempt_id)
            except Exception:  # the store itself failed
                log.exception("could not record the failure of attempt %s", attempt_id)
            self.stats.failed += 1
        finally:
            current_sink.reset(sink_token)

    async def _resources_for(self, rollout: Rollout) -> Resources:
        """The rollout's resources, with a copy of the LLM endpoint the runner fills with the attempt's URL."""
        resources = await self.store.get_resources(rollout.resources_version)
        if resources is None:
            resources = Resources(version=0)
        llm = resources.llm or LLMEndpoint(base_url="")
        resources.llm = LLMEndpoint(base_url=llm.base_url, model=llm.model, sampling=dict(llm.sampling))
        return resources
