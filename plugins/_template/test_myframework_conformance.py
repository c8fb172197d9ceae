"""The adapter conformance suite, run on a MyFramework agent (copy to tests/plugins/myframework/)."""

from __future__ import annotations

from typing import Any, ClassVar

from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply, text, tool_call


class TestMyFramework(AdapterConformance):
    adapter_name = "myframework"
    expected_agents: ClassVar[set[str]] = {"coordinator", "solver"}  # TODO(framework): the agents' names
    tool_name = "add"  # TODO(framework): a tool the agent calls
    framework_module = "myframework"

    def make_agent(self) -> Any:
        raise NotImplementedError("TODO(framework): build the agent as a user's module does")

    def reply(self, request: dict[str, Any]) -> Reply:
        # TODO(framework): answer each request from the request alone (rollouts run concurrently)
        messages = request["messages"]
        if messages[-1]["role"] == "tool":
            return text(f"The answer is {messages[-1]['content']}")
        return tool_call("add", {"a": 2, "b": 3})

    def make_task(self, i: int) -> Any:
        return f"What is {i} + {i + 3}?"

    def custom_run(self) -> Any:
        async def run(agent: Any, task: str) -> str:
            return str(await agent.run(task))  # TODO(framework): a run= as the framework's users write it

        return run

    def instrumentation_state(self) -> Any:
        import myframework  # TODO(framework): what _instrument changes

        return myframework.Agent.__dict__["run"], myframework.Agent.__dict__["call_tool"]
