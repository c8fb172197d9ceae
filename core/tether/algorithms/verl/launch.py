"""Starting verl's V1 trainer with tether's agent loop (imports verl and Ray: only ``VERL.fit`` imports this).

verl's ``run_ppo(config, task_runner_class=...)`` starts Ray and runs a task runner actor that builds the
trainer, the vLLM servers and the agent-loop workers. tether's task runner is verl's ``TaskRunnerV1`` with
one addition: once the trainer has started the servers, their addresses
(``LLMServerManager.get_addresses()``) go into the ``tether`` section of the config the agent-loop workers
are built with, so tether's proxy can reach them.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo


class _TetherTaskRunner(TaskRunnerV1.__ray_actor_class__):  # type: ignore[misc,name-defined,unused-ignore]
    def init_agent_loop_manager(self) -> None:
        self.config.tether.server_addresses = list(self.trainer.llm_server_manager.get_addresses())
        super().init_agent_loop_manager()


TetherTaskRunner = ray.remote(_TetherTaskRunner)


def launch(config: Any) -> None:
    """Run verl's trainer on ``config`` (from ``tether.algorithms.verl.config.build_config``) to the end."""
    run_ppo(config, task_runner_class=TetherTaskRunner)


def stop() -> None:
    """Stop verl's run: disconnect from Ray (a local cluster ``launch`` started ends with it)."""
    ray.shutdown()
