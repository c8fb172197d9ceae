"""What a ``tether.training.engine.session.Session`` opens, in order, on one exit stack: the store, the model
backend
(its policies declared, ``before_start`` run, started), the span batcher, the proxy, and the runner (in this
process, or Ray actors served the store and the backend over HTTP). Each part's close is pushed on the stack as
it opens, so a part that fails to open closes the ones before it, and closing the stack closes them in reverse."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tether.models.base import ModelBackend, PolicyBackend
from tether.policies import PolicyMap
from tether.store import Store, open_store

if TYPE_CHECKING:
    from tether.capture.span_batcher import SpanBatcher
    from tether.plugin.wrap import WrappedAgent
    from tether.proxy import ProxyServer
    from tether.training.engine.group_gate import GroupGate
    from tether.training.engine.ray_runners import RayPool, RayRunners
    from tether.training.engine.runner import Runner


@dataclass(slots=True)
class Parts:
    store: Store
    backend: ModelBackend
    batcher: SpanBatcher
    proxy: ProxyServer
    runner: Runner | RayPool
    #: where a group reward's rollouts meet (None when ``reward=`` has no group reward)
    gate: GroupGate | None = None


async def open_parts(
    stack: contextlib.AsyncExitStack,
    *,
    agent: WrappedAgent,
    model: str | ModelBackend,
    store_url: str,
    trains: bool,
    before_start: Callable[[ModelBackend], None] | None,
    runners: RayRunners | None,
    n_runners: int,
    cache_dir: Path | None = None,
) -> Parts:
    """Open every part, pushing each one's close on ``stack`` (the caller closes the stack on failure).
    ``cache_dir``: the run folder, where group rewards keep their judgements."""
    from tether.capture.span_batcher import PROXY_QUIET_S, SpanBatcher
    from tether.models import open_backend
    from tether.proxy import ProxyServer
    from tether.training.engine.group_gate import GroupGate
    from tether.training.engine.runner import Runner

    if agent.group_rewards and runners is not None:
        raise ValueError(
            "group rewards (tether.Judge, tether.MajorityVote) score a task's rollouts together in this process: "
            "drop Trainer(runners=...) or use a reward function"
        )
    store = open_store(store_url)
    stack.push_async_callback(store.close)
    gate = GroupGate(agent.plan, store, cache_dir) if agent.plan is not None and agent.group_rewards else None
    if gate is not None:
        stack.push_async_callback(gate.close)  # (after the runner stops: closes the judges' backends)
    if isinstance(model, ModelBackend):
        backend = model
    else:
        backend = open_backend(model)
        stack.push_async_callback(backend.close)
    declare_policies(backend, agent.policies, required=trains)
    if before_start is not None:
        before_start(backend)
    await backend.start()
    batcher = SpanBatcher(store, quiet_s=PROXY_QUIET_S)
    stack.push_async_callback(batcher.close)  # after the proxy stops: the session owns the batcher
    proxy = await stack.enter_async_context(ProxyServer(backend, batcher=batcher, policies=agent.policies))
    runner: Runner | RayPool
    if runners is not None:
        runner = await _start_remote(runners, stack, agent, store_url, store, backend)
    else:
        runner = await stack.enter_async_context(
            Runner(agent, store, proxy, batcher=batcher, concurrency=n_runners, gate=gate)
        )
    return Parts(store, backend, batcher, proxy, runner, gate)


async def _start_remote(
    runners: RayRunners,
    stack: contextlib.AsyncExitStack,
    agent: WrappedAgent,
    store_url: str,
    store: Store,
    backend: ModelBackend,
) -> RayPool:
    """Serve the store (unless the actors can open its URL themselves) and the backend to ``runners``
    and start them."""
    import secrets

    from tether.models.http_backend import TOKEN_ENV, BackendServer
    from tether.store.http.server import start_server

    # each server gets a token of this session's, handed to the actors in their runtime env: beyond
    # loopback the bind rule needs one, and on loopback it keeps other local users out
    env: dict[str, str] = {}
    if not store_url.startswith(("http://", "https://", "postgresql://", "postgres://")):
        env["TETHER_STORE_TOKEN"] = secrets.token_urlsafe(32)
        server = await start_server(store, host=runners.host, token=env["TETHER_STORE_TOKEN"])
        stack.push_async_callback(server.stop)
        store_url = server.url
    env[TOKEN_ENV] = secrets.token_urlsafe(32)
    served = await stack.enter_async_context(BackendServer(backend, host=runners.host, token=env[TOKEN_ENV]))
    pool = await runners.start(agent, store, store_url=store_url, backend_url=served.url, env=env)
    stack.push_async_callback(pool.close)
    return pool


def declare_policies(backend: ModelBackend, policies: PolicyMap, *, required: bool = True) -> None:
    """Tell ``backend`` the trained policies of a non-shared map (one set of weights each, plus the frozen
    start), or say which backends can hold them. A shared map needs nothing: the backend's one policy serves;
    neither does a backend that cannot hold policies when nothing trains (``required=False``: ``dev``)."""
    if policies.shared:
        return
    if not isinstance(backend, PolicyBackend):  # (the capability tier, tether.models.base)
        if not required:
            return
        raise ValueError(
            f"optimize={{policy: [sub-agents]}} gives each policy its own weights, which the "
            f"{type(backend).__name__} cannot hold: use model='embedded', 'hf:<path>' or 'vllm:<model>' with "
            "GRPO(lora=tether.LoRA(...)), or pass optimize= as a list (one shared policy)"
        )
    backend.declare_policies(policies.names)
