"""``tether.wrap``: makes an existing agent trainable by pairing it with the adapter that runs it.

``wrap(agent, reward=..., optimize=..., adapter=..., run=...)`` picks the adapter from the process-wide plugin
manager (``tether.plugin.manager.get_plugins``) unless one is given, checks the arguments, and returns a
``WrappedAgent``: what the runner runs on each task and scores (holding its ``passthrough=`` clients exempt from
the endpoint redirect meanwhile).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.capture.passthrough import client_ids, clients_held, passthrough
from tether.plugin._shipping import ship, unship
from tether.plugin.adapters import Adapter, CannotCopy
from tether.plugin.manager import get_plugins
from tether.policies import PolicyMap
from tether.rewards.base import GroupReward
from tether.rewards.plan import RewardPlan
from tether.types import Resources, RewardError, check_rewards

#: ``reward(task, output)``: the rollout's reward, or ``{sub-agent or policy name: reward, ...}`` (sync or async)
RewardFn = Callable[[Any, Any], float | Mapping[str, float] | Awaitable[float | Mapping[str, float]]]
RunFn = Callable[..., Any]  # run(agent, task) or run(agent, task, resources)


@dataclass(slots=True)
class WrappedAgent:
    """An agent ready to train: the user's object, the adapter that runs it, how to score it, and the policy
    that serves each sub-agent and which of them train (``policies``, see ``tether.policies``)."""

    agent: Any
    adapter: Adapter
    #: a function, or a form with group rewards (``tether.rewards.plan``)
    reward: Any = None
    policies: PolicyMap = field(default_factory=lambda: PolicyMap.from_optimize(None))
    run: RunFn | None = None
    #: the ``passthrough=`` clients (kept alive here: they are matched by id) and their openai clients' ids
    passthrough: tuple[Any, ...] = ()
    _passthrough_ids: frozenset[int] = field(init=False, repr=False, default=frozenset())
    _plan: RewardPlan | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._passthrough_ids = client_ids(self.passthrough)
        self._plan = RewardPlan.of(self.reward)

    @property
    def plan(self) -> RewardPlan | None:
        """The parts of a ``reward=`` that is not a plain function (None for a function or no reward)."""
        return self._plan

    @property
    def group_rewards(self) -> list[GroupReward]:
        """The group rewards in ``reward=`` (``tether.Judge``, ``tether.MajorityVote``), each once."""
        return self._plan.group_parts if self._plan is not None else []

    async def reward_problems(self) -> list[str]:
        """What would stop the group rewards scoring (an unreachable judge), in words naming the fix."""
        found = [await part.problem() for part in self.group_rewards]
        return [p for p in found if p is not None]

    @property
    def optimize(self) -> frozenset[str] | None:
        """The sub-agents whose calls train (None: all of them), as the policy map says."""
        return self.policies.agents

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (for ``tether.RayRunners``' actors) with the user's agent by reference to the module global
        that holds it, where one does (``tether.plugin._shipping``); the rest as pickle sends it."""
        parts = (self.adapter, self.reward, self.policies, self.run, self.passthrough)
        return (_unpickle, (ship(self.agent), *parts))

    async def run_task(self, task: Any, resources: Resources) -> Any:
        """Run one task: the user's ``run=`` if given (sync ones in a worker thread), else the adapter's.
        A ``run`` with a third parameter also gets the rollout's resources (prompt templates, endpoint).
        The user's ``run`` gets the rollout's own copy of the agent (``Adapter.rollout_copy``, what the
        adapter's run runs), or the user's object where the adapter cannot copy it, and runs inside the
        adapter's ``run_scope``, so its calls are captured and named as the adapter's own runs are."""
        with clients_held(self._passthrough_ids):
            return await self._run_task(task, resources)

    async def _run_task(self, task: Any, resources: Resources) -> Any:
        if self.run is None:
            return await self.adapter.run(self.agent, task, resources)
        try:
            agent = self.adapter.rollout_copy(self.agent)
        except CannotCopy:  # the error told the user to build a fresh one per task in run=, as this one may
            agent = self.agent
        args = (agent, task, resources) if _takes_resources(self.run) else (agent, task)
        with self.adapter.run_scope(agent):
            if inspect.iscoroutinefunction(self.run):
                return await self.run(*args)
            # to_thread copies the context, so the scope's context variables reach the worker thread
            result = await asyncio.to_thread(self.run, *args)
            if inspect.isawaitable(result):
                result = await result
            return result

    async def score(self, task: Any, output: Any) -> float | dict[str, float] | None:
        """The ``reward`` function's value for this output: a number, or a mapping from sub-agent or policy
        names to numbers (None when there is no reward function). It runs as ``tether.passthrough()``: a judge
        it calls keeps its own endpoint and is never trained."""
        if self.reward is None:
            return None
        if self._plan is not None:
            if self._plan.group_parts:
                raise RuntimeError("a reward= with group rewards is scored by the runner's group gate")
            return self._plan.combine(await self.score_functions(task, output), {})
        try:
            with passthrough(), clients_held(self._passthrough_ids):
                value = self.reward(task, output)
                if inspect.isawaitable(value):
                    value = await value
            return check_rewards(value)
        except Exception as exc:  # said as the reward's fault, so a report tells it from the agent's
            raise RewardError(f"reward(task, output) raised {type(exc).__name__}: {exc}") from exc

    async def score_functions(self, task: Any, output: Any) -> dict[int, float]:
        """The values of the functions in a ``reward=`` plan (by term index), run as ``score`` runs them."""
        assert self._plan is not None
        try:
            with passthrough(), clients_held(self._passthrough_ids):
                return await self._plan.score_functions(task, output)
        except Exception as exc:
            raise RewardError(f"reward(task, output) raised {type(exc).__name__}: {exc}") from exc

    def is_trainable(self, agent_name: str | None) -> bool:
        return self.policies.trains(agent_name)


def wrap(
    agent: Any,
    *,
    reward: RewardFn | GroupReward | Sequence[tuple[float, Any]] | Mapping[str, Any] | None = None,
    optimize: Mapping[str, Iterable[str] | str] | Iterable[str] | str | None = None,
    adapter: str | Adapter | None = None,
    run: RunFn | None = None,
    passthrough: Iterable[Any] = (),
) -> WrappedAgent:
    """Make ``agent`` trainable without changing it.

    ``reward(task, output)`` scores a rollout, with a number or with ``{sub-agent or policy: number}`` (each
    sub-agent's calls are then credited with their own value; the rollout's reward is the mean of the values),
    or the agent calls ``tether.emit_reward``; ``reward=`` also takes a group reward that scores a task's
    rollouts together (``tether.Judge``, ``tether.MajorityVote``), a weighted list such as
    ``[(0.7, tether.Judge(...)), (0.3, fn)]``, or ``{sub-agent or policy: one of those}``
    (``tether.rewards.plan``); ``optimize`` names the sub-agents whose calls are trained
    (default: all), as a list (one shared policy serves every sub-agent) or as ``{policy: [sub-agent, ...]}``
    (a policy with its own weights per key; the sub-agents not named are served by the frozen starting model,
    see ``tether.policies``); ``adapter`` picks the adapter by name when the automatic choice is ambiguous;
    ``run(agent, task)`` overrides how a task is fed to the agent: it gets the rollout's own copy of the agent
    where the framework's objects hold run state (AutoGen teams and agents, CrewAI crews), so concurrent
    rollouts never share one (``run(agent, task, resources)`` also gets the rollout's resources, e.g. the
    prompt templates APO tunes); ``passthrough`` lists model clients that are not the policy (a judge's):
    inside a rollout their calls keep their own endpoint and are recorded, never trained
    (``tether.passthrough``).
    """
    RewardPlan.of(reward)  # TypeError / ValueError naming the forms, before anything runs
    if run is not None and not callable(run):
        raise TypeError(f"run must be a function (agent, task) -> output, got {type(run).__name__}")
    plugins = get_plugins()
    if isinstance(adapter, Adapter):
        chosen = adapter
    elif isinstance(adapter, str):
        chosen = plugins.adapter_named(adapter)
    elif adapter is None:
        chosen = plugins.adapter_for(agent)
    else:
        raise TypeError(f'adapter must be an adapter name such as "langgraph" or an Adapter, got {adapter!r}')
    exempt = tuple(passthrough)
    policies = PolicyMap.from_optimize(optimize)
    return WrappedAgent(
        agent=agent,
        adapter=chosen,
        reward=reward,
        policies=policies,
        run=run,
        passthrough=exempt,
    )


def _unpickle(agent: Any, adapter: Adapter, *parts: Any) -> WrappedAgent:
    return WrappedAgent(unship(agent), adapter, *parts)


def _takes_resources(run: RunFn) -> bool:
    """True if ``run`` accepts a third positional argument (the resources)."""
    try:
        params = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3
