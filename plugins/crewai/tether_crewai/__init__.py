"""tether's ``crewai`` plugin: trains CrewAI crews unchanged (``pip install "tether[crewai]"``).

``CrewAIAdapter`` runs a ``Crew`` on each task (``kickoff(inputs=task)`` on a per-rollout copy) and captures
every model call and tool call — failed tool calls included — through CrewAI's event bus, named after the
role of the agent that made it; each agent's model requests also carry its role to tether's proxy. CrewAI's
telemetry, trace upload and version check are switched off inside rollouts. Importing this module does not
import CrewAI.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook, rollout_hook
from tether_crewai.adapter import CrewAIAdapter, CrewAIOutput, crew_inputs
from tether_crewai.telemetry import QUIET_ENV, crewai_quiet

EXTRA = "crewai"
REQUIRES = ("crewai",)

__all__ = [
    "EXTRA",
    "QUIET_ENV",
    "REQUIRES",
    "CrewAIAdapter",
    "CrewAIOutput",
    "crew_inputs",
    "register_adapters",
    "rollout_context",
]

register_adapters = adapters_hook(CrewAIAdapter)
#: keep CrewAI (and LiteLLM) from calling home during rollouts, whatever the adapter
rollout_context = rollout_hook(crewai_quiet)
