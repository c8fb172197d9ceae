"""Rollout copies of a smolagents agent.

A smolagents agent is not re-entrant: its run state (memory, step number, state variables, the task, a
``CodeAgent``'s Python executor with its variables) lives on the agent, and two concurrent ``run()`` calls on
one agent fail. ``fresh_copy`` makes a copy that shares the model (its ``openai.OpenAI`` client is safe to share
across threads), the tools, the prompt templates, the logger and the step callbacks, and has its own run state;
managed agents are copied the same way, recursively. A ``CodeAgent`` on a local executor gets a new
``LocalPythonExecutor``; one on a remote executor (E2B, Docker, …) keeps the user's.
"""

from __future__ import annotations

import copy
from typing import Any

from tether_smolagents.capture import copy_label


def fresh_copy(agent: Any) -> Any:
    """A copy of ``agent`` (and of its managed agents) with its own run state."""
    from smolagents.memory import AgentMemory
    from smolagents.monitoring import Monitor

    clone = copy.copy(agent)
    copy_label(agent, clone)
    clone.managed_agents = {name: fresh_copy(sub) for name, sub in agent.managed_agents.items()}
    clone.tools = dict(agent.tools)
    clone.state = {}
    clone.task = None
    clone.step_number = 0
    clone.interrupt_switch = False
    clone.memory = AgentMemory(clone.system_prompt)
    clone.monitor = Monitor(clone.model, clone.logger)
    if getattr(agent, "executor_type", None) == "local" and hasattr(agent, "python_executor"):
        clone.python_executor = clone.create_python_executor()
    return clone
