"""The shared adapter conformance suite on ADK's own multi-agent sample (fixtures/hello_world_ma.py: a root_agent
with ``sub_agents`` roll_agent and prime_agent, reached by ``transfer_to_agent``), its model
``LiteLlm(model="openai/...")``."""

from __future__ import annotations

from typing import Any, ClassVar

import hello_world_ma
from adk_script import reply
from google.adk.plugins.plugin_manager import PluginManager

from tether.capture import redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply

_HOOKS = ("run_before_model_callback", "run_before_tool_callback", "run_after_tool_callback")


class TestHelloWorldMultiAgent(AdapterConformance):
    adapter_name = "google_adk"
    expected_agents: ClassVar[set[str]] = {"root_agent", "roll_agent", "prime_agent"}
    tool_name = "roll_die"
    framework_module = "google.adk"

    def make_agent(self) -> Any:
        return hello_world_ma.root_agent

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return f"Roll a {i + 6}-sided die and check if it's prime."

    def custom_run(self) -> Any:
        async def run(agent: Any, task: str) -> str:
            from google.adk.runners import InMemoryRunner
            from google.genai import types

            runner = InMemoryRunner(agent=agent, app_name="mine")
            session = await runner.session_service.create_session(app_name="mine", user_id="me")
            message = types.Content(role="user", parts=[types.Part(text=task)])
            texts = [
                part.text
                async for event in runner.run_async(user_id="me", session_id=session.id, new_message=message)
                for part in (event.content.parts if event.content and event.content.parts else [])
                if part.text
            ]
            await runner.close()
            return texts[-1] if texts else ""

        return run

    def instrumentation_state(self) -> Any:
        return (
            *(vars(PluginManager)[hook] for hook in _HOOKS),
            vars(PluginManager)["run_on_tool_error_callback"],
            redirect.install_count(),
        )
