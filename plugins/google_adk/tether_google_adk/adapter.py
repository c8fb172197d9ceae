"""The adapter for Google ADK agents: an ``LlmAgent`` (``google.adk.agents.Agent``) or any ``BaseAgent`` tree
(``sub_agents``, ``AgentTool``s, workflow agents), whose models are ``LiteLlm(model="openai/<model>")``.

``run(agent, task, resources)`` runs the agent in a fresh ``InMemoryRunner`` and session on the task's text
(``tether.plugin.tasks.task_text``) and returns a ``RunOutput``: ``{"text": <the last final response's text>,
"agent": <the agent that gave it (the event's author)>, "state": <the session state>}`` with the list of ADK
``Event``s as ``.events``. One agent tree serves concurrent rollouts (each has its own runner and session).

Model calls reach tether's proxy through tether's endpoint redirect: LiteLLM's ``openai/`` route calls
``openai.AsyncOpenAI`` (it caches SDK clients; the redirect reaches cached ones too). ADK's Gemini models (a
model string such as ``"gemini-2.0-flash"``, or ``Gemini``) call google-genai, which cannot reach an
OpenAI-compatible endpoint: ``run_scope`` raises ``NotLiteLlm`` naming the fix before such a tree runs.
Naming and tool capture: ``tether_google_adk.capture`` (through ADK's ``PluginManager``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tether.capture.context import current_agent
from tether.capture.patching import Seam
from tether.plugin.adapters import Adapter, SpanSink, json_safe
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput, task_text
from tether.types import Resources
from tether_google_adk import capture

_SEAM = Seam("google-adk", "tether_google_adk.capture")
_APP = "tether"
_USER = "tether"


class NotLiteLlm(TypeError):
    """An agent in the tree uses a model that does not go through LiteLLM's OpenAI route."""


class GoogleADKOutput(RunOutput):
    """What ``GoogleADKAdapter.run`` returns: ``{"text", "agent", "state"}`` plus ``.events``."""

    events: Any = None


def _agents(root: Any) -> Iterator[Any]:
    """Every agent of the tree: ``sub_agents`` and the agents of ``AgentTool``s, each once."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        agent = pending.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        pending.extend(getattr(agent, "sub_agents", None) or [])
        for tool in getattr(agent, "tools", None) or []:
            inner = getattr(tool, "agent", None)
            if inner is not None:
                pending.append(inner)


def check_models(root: Any) -> None:
    """Raise ``NotLiteLlm`` if an ``LlmAgent`` of the tree resolves to a model other than ``LiteLlm``."""
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm

    for agent in _agents(root):
        if not isinstance(agent, LlmAgent):
            continue
        model = agent.model
        if isinstance(model, LiteLlm):
            continue
        if not model:  # inherited from the nearest LlmAgent ancestor, else ADK's default (a Gemini model)
            parent = agent.parent_agent
            while parent is not None and not isinstance(parent, LlmAgent):
                parent = parent.parent_agent
            if parent is not None:
                continue  # that ancestor is checked itself
            model = "ADK's default model"
        shown = model if isinstance(model, str) else type(model).__name__
        raise NotLiteLlm(
            f"ADK agent {agent.name!r} uses the model {shown!r}, which ADK calls through google-genai: it cannot "
            "reach tether's OpenAI-compatible endpoint. Give the agent (or its root) a LiteLLM model on the "
            'OpenAI route: from google.adk.models.lite_llm import LiteLlm; model=LiteLlm(model="openai/<model>") '
            "(tether redirects its calls; api_base is not needed)."
        )


class GoogleADKAdapter(Adapter):
    """Runs and captures Google ADK agent trees whose models are ``LiteLlm(model="openai/...")``."""

    name = "google_adk"
    extra = "google-adk"
    agent_types = (("google.adk.agents.base_agent", "BaseAgent"),)

    def run_scope(self, agent: Any) -> contextlib.AbstractContextManager[Any]:
        check_models(agent)
        return contextlib.nullcontext()

    # -- capture ------------------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        from google.adk.plugins.plugin_manager import PluginManager

        hooks = (
            "run_before_model_callback",
            "run_before_tool_callback",
            "run_after_tool_callback",
            "run_on_tool_error_callback",
        )
        _SEAM.require(PluginManager, *hooks)
        for hook in hooks:
            _SEAM.require_parameters(
                getattr(PluginManager, hook), "tool_context" if "tool" in hook else "callback_context"
            )

        def sink_of() -> SpanSink | None:
            return self.sink

        self._patch(
            Patch(PluginManager, "run_before_model_callback", capture.make_before_model),
            Patch(PluginManager, "run_before_tool_callback", capture.make_before_tool),
            Patch(
                PluginManager,
                "run_after_tool_callback",
                lambda o: capture.make_after_tool(o, sink_of, failed=False),
            ),
            Patch(
                PluginManager,
                "run_on_tool_error_callback",
                lambda o: capture.make_after_tool(o, sink_of, failed=True),
            ),
        )

    # -- running ------------------------------------------------------------------------------------------

    async def run(self, agent: Any, task: Any, resources: Resources) -> GoogleADKOutput:
        from google.adk.runners import InMemoryRunner
        from google.genai import types

        check_models(agent)  # what run_scope checks for a user's run=
        token = current_agent.set(None)
        runner = InMemoryRunner(agent=agent, app_name=_APP)
        try:
            session = await runner.session_service.create_session(app_name=_APP, user_id=_USER)
            message = types.Content(role="user", parts=[types.Part(text=task_text(task))])
            events = [
                event
                async for event in runner.run_async(user_id=_USER, session_id=session.id, new_message=message)
            ]
            done = await runner.session_service.get_session(app_name=_APP, user_id=_USER, session_id=session.id)
        finally:
            await runner.close()
            current_agent.reset(token)
        return summarize(events, getattr(done, "state", None))


def summarize(events: list[Any], state: Any = None) -> GoogleADKOutput:
    """A ``GoogleADKOutput`` from a run's events: the last final response with text, and its author."""
    text, author = "", None
    for event in events:
        parts = getattr(getattr(event, "content", None), "parts", None) or []
        said = "".join(p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", False))
        if said and event.is_final_response():
            text, author = said, event.author
    output = GoogleADKOutput(text=text, agent=author, state=json_safe(dict(state) if state else {}))
    output.events = events
    return output
