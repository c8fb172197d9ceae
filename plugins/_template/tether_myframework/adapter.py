"""The MyFramework adapter: runs a MyFramework agent on each task and captures its calls (``capture``)."""

from __future__ import annotations

from typing import Any

from tether.plugin.adapters import Adapter, SpanSink
from tether.plugin.instrument import Patch
from tether.plugin.tasks import task_text
from tether.types import Resources
from tether_myframework.capture import captured_call_tool, named_run


class MyFrameworkAdapter(Adapter):
    name = "myframework"
    extra = "myframework"
    #: TODO(framework): (module, class) of the objects users run; looked up in sys.modules, never imported
    agent_types = (("myframework", "Agent"),)

    def _instrument(self, sink: SpanSink) -> None:
        from myframework import Agent  # TODO(framework): the classes whose methods capture and name calls

        self._patch(  # undone by uninstrument, and if _instrument fails
            # TODO(framework): the method that runs one agent (its model calls are named after the agent)
            Patch(Agent, "run", named_run),
            # TODO(framework): the method that calls one tool (one ``tool`` span per call)
            Patch(Agent, "call_tool", lambda original: captured_call_tool(original, lambda: self.sink)),
        )

    # TODO(framework): if the framework's objects hold run state (a conversation, a running flag), override
    # rollout_copy(agent) to return a copy that shares none, so that concurrent rollouts stay apart

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        return await agent.run(task_text(task))  # TODO(framework): how the framework runs one task
