"""tether's ``autogen`` plugin: trains AutoGen (autogen-agentchat) agents and teams unchanged
(``pip install "tether[autogen]"``).

``AutoGenAdapter`` runs an agent or team on each task (a fresh copy per rollout) and captures every model
call and tool call — failed ones, and those a workbench such as McpWorkbench answers, included — with the
name of the agent that made it. Model calls go to tether's proxy through tether's endpoint redirect.
Importing this module does not import AutoGen.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_autogen.adapter import AutoGenAdapter, AutoGenOutput, task_text

EXTRA = "autogen"
REQUIRES = ("autogen_agentchat", "autogen_ext", "autogen_core")

__all__ = ["EXTRA", "REQUIRES", "AutoGenAdapter", "AutoGenOutput", "register_adapters", "task_text"]

register_adapters = adapters_hook(AutoGenAdapter)
