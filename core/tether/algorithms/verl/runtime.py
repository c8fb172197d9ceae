"""The tether side of verl's agent-loop workers: one ``Session`` per worker process, shared by its loops.

verl creates an agent loop object per sample and runs many at once on a worker's event loop. Each needs one
tether rollout of its task; a ``Session`` (store, proxy, runner, and a ``ServerPool`` over verl's vLLM
servers) is opened once per process and the rollouts the loops ask for are gathered into ``Session.run_jobs``
calls: every loop that asks while none is running joins the next call (one job per sampling, so training and
validation samples can share it). A ``Session`` runs one batch at a time, so this is how concurrent loops
share it.

What a worker needs travels as a plain dict (``RuntimeSpec``), written by ``tether.VERL`` into verl's config:
where the pickled wrapped agent is, the trainer's settings, and the servers' addresses.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from tether import _json
from tether.models.base import ModelBackend
from tether.plugin.wrap import WrappedAgent, wrap
from tether.training.engine.session import Session
from tether.training.run.settings import Settings
from tether.training.signal.batch import Job, RolloutResult
from tether.types import Mode, Task


class RuntimeSpec(TypedDict, total=False):
    """What a verl worker needs to run tether rollouts (the ``tether`` section of verl's config)."""

    agent_path: str  # the pickled agent (``save_agent``)
    settings: dict[str, Any]  # ``tether.training.engine.session.Settings`` fields
    server_addresses: list[str]  # verl's vLLM servers, filled in when verl has started them
    model: str | None  # the served model name (default: the servers' first listed model)
    logprobs: bool
    defaults: dict[str, Any]  # request parameters for every call (top_k)


def save_agent(agent: WrappedAgent, path: Path) -> Path:
    """Pickle what ``agent`` was wrapped from for verl's workers, which wrap it again: the user's agent,
    reward, ``optimize`` and ``run`` (with cloudpickle, so functions of a ``__main__`` script travel) and the
    adapter's name (adapters hold process state: each worker uses its own)."""
    import cloudpickle  # comes with Ray, which verl needs

    parts = {
        "agent": agent.agent,
        "reward": agent.reward,
        "optimize": sorted(agent.optimize) if agent.optimize is not None else None,
        "run": agent.run,
        "adapter": agent.adapter.name,
    }
    try:
        dump = cloudpickle.dumps(parts)
    except Exception as exc:
        raise TypeError(
            f"tether.VERL sends the wrapped agent to verl's Ray workers, but it cannot be pickled ({exc}): "
            "build its unpicklable parts (clients, connections) inside its functions, or at import of a module "
            "the workers import"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dump)
    return path


def load_agent(path: str | Path) -> WrappedAgent:
    """The wrapped agent ``save_agent`` wrote, wrapped again in this process."""
    with open(path, "rb") as f:
        parts = pickle.load(f)
    return wrap(
        parts["agent"],
        reward=parts["reward"],
        optimize=parts["optimize"],
        run=parts["run"],
        adapter=parts["adapter"],
    )


def settings_dict(settings: Settings) -> dict[str, Any]:
    return {
        "sampling": dict(settings.sampling),
        "max_attempts": settings.max_attempts,
        "timeout_s": settings.timeout_s,
        "credit": settings.credit,
        "tool_error_penalty": settings.tool_error_penalty,
        "n_runners": settings.n_runners,
        "seed": settings.seed,
    }


def tether_sampling(sampling_params: Mapping[str, Any], response_length: int | None) -> dict[str, Any]:
    """The proxy's sampling for a rollout from verl's ``sampling_params`` (temperature, top_p) and its
    ``rollout.response_length`` (the most tokens one call may generate)."""
    out = {k: sampling_params[k] for k in ("temperature", "top_p") if sampling_params.get(k) is not None}
    if response_length:
        out["max_tokens"] = int(response_length)
    return out


@dataclass(slots=True)
class _Request:
    task: Task
    sampling: dict[str, Any]
    done: asyncio.Future[RolloutResult]


@dataclass
class Rollouts:
    """Runs tether rollouts for the agent loops of one process, gathered into shared ``Session`` batches.

    ``await rollouts.run(task, sampling)`` returns that task's ``RolloutResult`` (its transitions built).
    """

    agent: WrappedAgent
    backend: ModelBackend
    settings: Settings = field(default_factory=Settings)
    mode: Mode = Mode.TRAIN
    batches: int = 0  # Session batches run so far (how well requests were gathered)
    _session: Session | None = None
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    _pending: list[_Request] = field(default_factory=list)
    _driver: asyncio.Task[None] | None = None

    async def run(self, task: Task, sampling: Mapping[str, Any] | None = None) -> RolloutResult:
        session = await self._open()
        done: asyncio.Future[RolloutResult] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(task, dict(sampling or {}), done))
        if self._driver is None or self._driver.done():
            self._driver = asyncio.create_task(self._drive(session))
        return await done

    async def close(self) -> None:
        if self._driver is not None:
            await asyncio.gather(self._driver, return_exceptions=True)
        session, self._session = self._session, None
        if session is not None:
            await session.__aexit__(None, None, None)
        await self.backend.close()  # the session leaves a backend it was given open

    async def _open(self) -> Session:
        async with self._opening:
            if self._session is None:
                session = Session(self.agent, self.backend, store="memory:", settings=self.settings)
                await session.__aenter__()
                self._session = session
        return self._session

    async def _drive(self, session: Session) -> None:
        while self._pending:
            await asyncio.sleep(0)  # the other samples verl starts in the same tick join this batch
            requests, self._pending = self._pending, []
            try:
                groups: dict[bytes, list[_Request]] = {}
                for request in requests:
                    groups.setdefault(_json.dumps(request.sampling), []).append(request)
                jobs = [
                    Job([r.task for r in group], await session.publish(group[0].sampling))
                    for group in groups.values()
                ]
                batches = await session.run_jobs(jobs, self.mode)
                self.batches += 1
            except Exception as exc:
                for request in requests:
                    if not request.done.done():
                        request.done.set_exception(exc)
                continue
            for group, batch in zip(groups.values(), batches, strict=True):
                for request, result in zip(group, batch.results, strict=True):
                    if not request.done.done():
                        request.done.set_result(result)


def settings_from(spec: Mapping[str, Any]) -> Settings:
    known = Settings.__dataclass_fields__
    return Settings(**{k: v for k, v in dict(spec).items() if k in known})
