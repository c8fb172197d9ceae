"""Runners as Ray actors: ``Trainer(..., runners=tether.RayRunners(n=4))`` (``pip install "tether[ray]"``).

Instead of running rollouts in its own process, the session starts ``n`` Ray actors
(``tether.training.engine._ray_actor.RunnerActor``), each a ``Runner`` with its own adapter instrumentation and
its own proxy,
taking rollouts from a shared store and writing their spans there; the trainer enqueues, waits and harvests
as it does with in-process runners. What the actors share with the trainer:

- the store: a ``postgresql://`` or ``http://`` store URL is used by the actors as is; any other store
  (``memory:``, SQLite) is served to them over HTTP (``tether.store.http.server``) by the trainer.
- the model: the trainer's backend, served whole over HTTP (``tether.models.http_backend``): each actor's
  proxy records the backend's own results (token ids, logprobs, weights version), so the spans are the ones
  an in-process run records, and an actor's proxy and adapters share one span queue, keeping their order.
- the agent: the ``tether.wrap`` result is pickled by Ray (cloudpickle). The user's agent object goes by
  reference to the module global that holds it, when one does (``tether.plugin._shipping``; a compiled LangGraph
  graph must go so: it does not survive being rebuilt by value), and functions and classes by reference to
  their module: the actors import those modules (installed,
  or shipped with ``runtime_env={"working_dir": ...}`` or ``{"py_modules": [...]}``). An agent built inside a
  function or in the ``__main__`` script, closures and lambdas travel by value.

Each actor takes ``concurrency`` rollouts at a time (1 by default, so work spreads evenly over actors). An
actor that dies loses no rollout: its attempts stop heartbeating and the store's sweep (run by the other
actors and by the trainer while it waits) ends them ``timeout`` after the rollouts' ``heartbeat_timeout_s``
(``Trainer(heartbeat_timeout_s=...)``) and requeues them (within ``max_attempts``); the pool starts a new
actor in its place. Nothing here imports Ray until the session starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.store.errors import StoreError
from tether.types import RolloutStatus

if TYPE_CHECKING:
    from tether.plugin.wrap import WrappedAgent
    from tether.store import Store
    from tether.training.engine.runner import RunnerStats

log = logging.getLogger(__name__)

_WAIT_S = 0.1  # how often the trainer looks at the rollouts it waits for (and sweeps stale attempts)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError('tether.RayRunners needs Ray: pip install "tether[ray]"') from None
    return ray


@dataclass(frozen=True, slots=True)
class RayRunners:
    """Run rollouts in ``n`` Ray actors, each taking ``concurrency`` rollouts at a time.

    ``address``: None uses the Ray already initialised in this process, else starts a local head
    (``ray.init(include_dashboard=False)``, shut down with the session); ``"auto"`` or ``"ray://host:10001"``
    joins a running cluster. ``num_cpus`` per actor: 0 by default (a runner waits on I/O; with more, actors
    queue for the cluster's CPUs). ``runtime_env`` goes to each actor (``working_dir``, ``py_modules``,
    ``env_vars``). ``host`` is the address the trainer serves its store and model backend on for the actors:
    loopback by default (actors on this machine); an address the cluster can reach for a multi-machine one.
    ``max_restarts``: how many dead actors the pool replaces in one session before it gives up.
    """

    n: int = 4
    address: str | None = None
    concurrency: int = 1
    num_cpus: float = 0.0
    runtime_env: Mapping[str, Any] | None = None
    host: str = "127.0.0.1"
    poll_s: float = 0.05
    max_restarts: int = 16
    options: Mapping[str, Any] = field(default_factory=dict)  # other ray actor options (resources, ...)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"RayRunners needs n >= 1 actors, got {self.n}")
        if self.concurrency < 1:
            raise ValueError(f"RayRunners needs concurrency >= 1, got {self.concurrency}")

    async def start(
        self,
        agent: WrappedAgent,
        store: Store,
        *,
        store_url: str,
        backend_url: str,
        env: Mapping[str, str] | None = None,
    ) -> RayPool:
        """Start the actors (Ray too, when asked); the session calls this. ``env``: environment variables
        for the actors (the tokens of the servers they call), added to ``runtime_env["env_vars"]``."""
        pool = RayPool(self, agent, store, store_url=store_url, backend_url=backend_url, env=env)
        await pool.start()
        return pool


@dataclass(slots=True)
class _Actor:
    handle: Any
    worker_id: str
    serving: Any  # the ObjectRef of its serve() call: ready when it ended (stopped, failed or died)


class RayPool:
    """The running actors of a session; ``run_until_idle`` is what the session awaits for a batch."""

    def __init__(
        self,
        config: RayRunners,
        agent: WrappedAgent,
        store: Store,
        *,
        store_url: str,
        backend_url: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.env = dict(env or {})
        self.agent = agent
        self.store = store
        self.store_url = store_url
        self.backend_url = backend_url
        self.actors: list[_Actor] = []
        from tether.training.engine.runner import RunnerStats

        self.restarts = 0
        self.stats = RunnerStats()
        self._started_ray = False
        self._actor_class: Any = None

    async def start(self) -> None:
        ray = _ray()
        from ray import cloudpickle

        try:
            cloudpickle.dumps(self.agent)
        except Exception as exc:
            raise TypeError(
                f"the wrapped agent cannot be pickled for Ray actors ({type(exc).__name__}: {exc}); define the "
                "agent in a module the actors can import, or build it inside a function"
            ) from exc
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if self.config.address is not None:
                kwargs["address"] = self.config.address
            await asyncio.to_thread(ray.init, **kwargs)
            self._started_ray = True
        from tether.training.engine._ray_actor import RunnerActor

        self._actor_class = ray.remote(RunnerActor)
        self.actors = [self._spawn() for _ in range(self.config.n)]
        await asyncio.gather(*(_wait(a.handle.ready.remote()) for a in self.actors))

    def _spawn(self) -> _Actor:
        worker_id = f"ray-{uuid.uuid4().hex[:8]}"
        options: dict[str, Any] = {"num_cpus": self.config.num_cpus, **self.config.options}
        runtime_env = dict(self.config.runtime_env or {})
        if self.env:  # through Ray's runtime env, never the actor's arguments (which Ray's dashboard shows)
            runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **self.env}
        if runtime_env:
            options["runtime_env"] = runtime_env
        handle = self._actor_class.options(**options).remote(
            self.agent,
            store_url=self.store_url,
            backend_url=self.backend_url,
            worker_id=worker_id,
            concurrency=self.config.concurrency,
            poll_s=self.config.poll_s,
        )
        return _Actor(handle, worker_id, handle.serve.remote())

    @property
    def worker_ids(self) -> list[str]:
        return [a.worker_id for a in self.actors]

    async def run_until_idle(self, rollout_ids: Sequence[str] | None = None) -> RunnerStats:
        """Wait until every rollout in ``rollout_ids`` has finished (None: until none is queued or running),
        sweeping stale attempts (those of a dead actor) and replacing actors that died."""
        waiting = list(dict.fromkeys(rollout_ids or ()))
        while True:
            self._replace_dead()
            try:
                await self.store.requeue_stale()
                if rollout_ids is not None:
                    unfinished = await self.store.list_rollouts(rollout_ids=waiting)
                    waiting = [r.rollout_id for r in unfinished if not r.status.finished]
                    if not waiting:
                        return self.stats
                else:
                    busy = [
                        r
                        for status in (RolloutStatus.QUEUED, RolloutStatus.RUNNING)
                        for r in await self.store.list_rollouts(status=status)
                    ]
                    if not busy:
                        return self.stats
            except StoreError as exc:
                log.warning("could not check on the rollouts the Ray runners run: %s", exc)
            await asyncio.sleep(_WAIT_S)

    def _replace_dead(self) -> None:
        ray = _ray()
        refs = [a.serving for a in self.actors]
        ended, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ended:
            return
        ended_ids = {ref.hex() for ref in ended}
        for index, actor in enumerate(self.actors):
            if actor.serving.hex() not in ended_ids:
                continue
            try:
                ray.get(actor.serving, timeout=0)
                why = "its serve() returned"
            except Exception as exc:
                why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            if self.restarts >= self.config.max_restarts:
                raise RuntimeError(
                    f"Ray runner {actor.worker_id} ended ({why}) and {self.restarts} actors were replaced "
                    "already this session (RayRunners.max_restarts): giving up"
                )
            self.restarts += 1
            self.actors[index] = self._spawn()
            log.warning(
                "Ray runner %s ended (%s): its attempts end by heartbeat and are retried; started %s",
                actor.worker_id,
                why,
                self.actors[index].worker_id,
            )

    async def close(self, timeout_s: float = 30.0) -> None:
        """Stop the actors (each finishes its rollouts in flight), then Ray if the pool started it."""
        ray = _ray()
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                actor.handle.stop.remote()
        deadline = time.monotonic() + timeout_s
        for actor in self.actors:
            try:
                result = await _wait(actor.serving, max(deadline - time.monotonic(), 0.1))
                self.stats.succeeded += int(result.get("succeeded", 0))
                self.stats.failed += int(result.get("failed", 0))
            except Exception as exc:  # died, or did not stop in time
                log.debug("Ray runner %s did not stop cleanly: %s", actor.worker_id, exc)
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor.handle)
        self.actors.clear()
        if self._started_ray:
            await asyncio.to_thread(ray.shutdown)


async def _wait(ref: Any, timeout_s: float | None = None) -> Any:
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)
