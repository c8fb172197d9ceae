"""tether's agent loop for verl's V1 agent-loop API: one tether rollout per sample, one row per LLM call.

verl (0.9) builds an agent loop from its registry (``register(name)``; in worker processes from the YAML at
``rollout.agent.agent_loop_config_path``) for every sample it draws and awaits ``run(sampling_params,
**row)``, where ``row`` holds the dataset row's fields plus ``uid`` (the prompt's id, the GRPO group) and
``session_id`` (the sample number among ``rollout.n``). ``TetherAgentLoop.run`` runs the wrapped agent on the
row's tether task through the worker's shared ``Session`` (``runtime.Rollouts``): its model calls go through
tether's proxy to verl's vLLM servers (``pool.ServerPool``), which verl keeps up to date with the actor's
weights and puts to sleep while it trains. The rollout's transitions become the outputs (``rows``).

Importing this module imports verl: only verl's workers and the bridge's tests do.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from tether.algorithms.verl.dataset import LOOP_NAME, task_from
from tether.algorithms.verl.pool import ServerPool
from tether.algorithms.verl.rows import rollout_rows
from tether.algorithms.verl.runtime import Rollouts, load_agent, settings_from, tether_sampling

log = logging.getLogger(__name__)

#: one ``Rollouts`` per worker process and run (keyed by the pickled agent's path)
_RUNTIMES: dict[str, Rollouts] = {}


def rollouts_for(spec: dict[str, Any]) -> Rollouts:
    """The process's ``Rollouts`` for the run ``spec`` (the ``tether`` section of verl's config) describes."""
    key = str(spec["agent_path"])
    runtime = _RUNTIMES.get(key)
    if runtime is None:
        addresses = list(spec.get("server_addresses") or [])
        if not addresses:
            raise RuntimeError(
                "the tether section of verl's config names no vLLM server: run verl through tether.VERL.fit, "
                "which fills tether.server_addresses from verl's LLMServerManager.get_addresses()"
            )
        backend = ServerPool(
            addresses,
            model=spec.get("model"),
            logprobs=bool(spec.get("logprobs", True)),
            defaults=dict(spec.get("defaults") or {}),
        )
        runtime = Rollouts(load_agent(key), backend, settings_from(spec.get("settings") or {}))
        _RUNTIMES[key] = runtime
    return runtime


def weights_version(global_steps: Any) -> int:
    """The actor weights version that samples for training step ``global_steps`` in verl's sync trainer: the
    servers get step k-1's weights before step k's rollouts (and step 0's at start)."""
    return max(int(global_steps) - 1, 0)


@register(LOOP_NAME)
class TetherAgentLoop(AgentLoopBase):  # type: ignore[misc,unused-ignore]
    """Runs the tether-wrapped agent on the sample's task and returns one output per LLM call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        section = self.config.get("tether")
        if section is None:
            raise RuntimeError("verl's config has no tether section: run verl through tether.VERL.fit")
        spec = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else section
        self.spec: dict[str, Any] = dict(spec)  # type: ignore[arg-type,unused-ignore]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # type: ignore[override,unused-ignore]
        task = task_from(kwargs)
        rollouts = rollouts_for(self.spec)
        response_length = self.rollout_config.get("response_length")
        started = time.perf_counter()
        result = await rollouts.run(task, tether_sampling(sampling_params, response_length))
        elapsed = time.perf_counter() - started
        if not result.succeeded:
            log.warning("tether rollout of task %s failed: %s", task.task_id, (result.rollout.error or "")[-500:])
        for problem in result.problems:
            log.warning("tether rollout of task %s: %s", task.task_id, problem)
        version = weights_version(kwargs.get("global_steps", 0))
        rows = rollout_rows(
            result.transitions,
            reward=result.rollout.reward if result.succeeded else None,
            uid=str(kwargs.get("uid", task.task_id)),
            session=int(kwargs.get("session_id", 0)),
            prompt_length=self.rollout_config.get("prompt_length"),
            response_length=response_length,
            extra_fields={"global_steps": version, "min_global_steps": version, "max_global_steps": version},
        )
        return [
            AgentLoopOutput(**row.output_fields(), metrics=AgentLoopMetrics(generate_sequences=elapsed))
            for row in rows
        ]
