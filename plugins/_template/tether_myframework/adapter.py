"""The MyFramework adapter: runs a MyFramework agent on each task and captures its calls (``capture``)."""

from __future__ import annotations

import sys
from typing import Any

from tether.plugin.adapters import Adapter, SpanSink
from tether.plugin.instrument import Patch
from tether.plugin.tasks import task_text
from tether.types import Resources
from tether_myframework.capture import captured_call_tool, named_run


class MyFrameworkAdapter(Adapter):
    name = "myframework"
    extra = "myframework"

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []

    def accepts(self, agent: Any) -> bool:
        # never import the framework here: if it is not imported, the agent cannot be one of its objects
        framework = sys.modules.get("myframework")  # TODO(framework): its top-level module
        return framework is not None and isinstance(agent, framework.Agent)  # TODO(framework): the agent class(es)

    def _instrument(self, sink: SpanSink) -> None:
        from myframework import Agent  # TODO(framework): the classes whose methods capture and name calls

        patches = [
            # TODO(framework): the method that runs one agent (its model calls are named after the agent)
            Patch(Agent, "run", named_run),
            # TODO(framework): the method that calls one tool (one ``tool`` span per call)
            Patch(Agent, "call_tool", lambda original: captured_call_tool(original, lambda: self.sink)),
        ]
        try:
            for patch in patches:
                patch.apply()
        except BaseException:
            for patch in patches:
                patch.undo()
            raise
        self._patches = patches

    def _uninstrument(self) -> None:
        for patch in reversed(self._patches):
            patch.undo()
        self._patches = []

    # TODO(framework): if the framework's objects hold run state (a conversation, a running flag), override
    # rollout_copy(agent) to return a copy that shares none, so that concurrent rollouts stay apart

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        return await agent.run(task_text(task))  # TODO(framework): how the framework runs one task
