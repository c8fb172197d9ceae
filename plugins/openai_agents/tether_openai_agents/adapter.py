"""The adapter for OpenAI Agents SDK agents (``agents.Agent``), handoffs included.

``run(agent, task, resources)`` is ``await Runner.run(agent, input=<task text>, run_config=...)`` and
returns the run's ``final_output``. The task text is ``tether.plugin.tasks.task_text``'s (a list is passed on
as the SDK's input items): the task when it is a string; for a dict, the first string among its ``"task"``,
``"question"``, ``"input"`` and ``"prompt"`` keys, else the dict as JSON. An agent that declares its run
context's type (``Agent[MyContext](...)``) gets a fresh ``MyContext()`` per rollout
(``tether_openai_agents.context``: when that cannot be built, the rollout's error says what to pass). The
run's ``RunConfig`` gives it:

- a model provider that makes every agent whose ``model`` is a name (or unset) call the Chat Completions
  API (which every OpenAI-compatible server serves; the proxy serves the Responses API too) at the rollout's
  endpoint, through an ``AsyncOpenAI`` client made for the running event loop (``tether.plugin.loop_pool``).
  The SDK's own default client shares one HTTP pool bound to the first event loop that used it, which fails in
  the next one; the user's global settings are not touched for this.
  Agents built with an explicit model object keep it (its requests are redirected by ``tether.capture.redirect``);
- tracing on, with sensitive data, since nothing leaves the process (``tether_openai_agents.gate``);
- a ``tool_error_formatter`` that only records a failing tool's exception for its span (the model still
  gets the SDK's default message).

A ``run=`` function that calls ``Runner.run`` itself can pass ``rollout_run_config(resources)`` to get the
same. While instrumented the adapter also makes Chat Completions the SDK's default API
(``set_default_openai_api("chat_completions")``), so agents run by a ``run=`` function without that config
reach the proxy too; ``uninstrument`` restores the previous default. The SDK has no public getter for that
default: it is read and restored through ``agents.models._openai_shared`` (private), which ``responses_default()``
checks first, raising ``SeamMissing`` naming the SDK version if a release moves it (nothing is installed then).

Capture (``instrument``) holds the gate — tether's trace processor in place of the SDK's, see
``tether_openai_agents.capture`` — and registers an agent resolver so the endpoint redirect's ``X-Tether-Agent``
header names the agent making each model request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator
from typing import Any

from tether.capture.context import add_agent_resolver, current_scope, remove_agent_resolver
from tether.capture.patching import Seam
from tether.plugin.adapters import Adapter, SpanSink
from tether.plugin.loop_pool import LoopPool
from tether.plugin.tasks import task_text
from tether.types import Resources, Task
from tether_openai_agents import gate
from tether_openai_agents.context import default_context, explain

_SEAM = Seam("openai-agents", "tether_openai_agents.adapter")
#: the private module that holds the SDK's default OpenAI API, and its getter and setter
RESPONSES_DEFAULT_MODULE = "agents.models._openai_shared"
RESPONSES_DEFAULT_FUNCTIONS = ("get_use_responses_by_default", "set_use_responses_by_default")


def responses_default() -> Any:
    """The SDK's private module holding its default API (``RESPONSES_DEFAULT_MODULE``), checked: ``SeamMissing``
    naming the SDK version when it or its getter and setter moved."""
    try:
        module = importlib.import_module(RESPONSES_DEFAULT_MODULE)
    except ImportError as exc:
        raise _SEAM.missing(f"{RESPONSES_DEFAULT_MODULE} cannot be imported ({exc})") from exc
    _SEAM.require(module, *RESPONSES_DEFAULT_FUNCTIONS)
    return module


def agent_name() -> str | None:
    """The OpenAI Agents SDK agent running in this context, while tether captures (an agent resolver)."""
    processor = gate.held()
    return processor.agent_name() if processor is not None else None


def task_input(task: Any) -> Any:
    """What ``Runner.run(agent, input=...)`` receives for a task (see the module docstring)."""
    if isinstance(task, Task):
        task = task.input
    return task if isinstance(task, list) else task_text(task)


#: the ``AsyncOpenAI`` client of each event loop (its HTTP pool binds to the loop that first uses it)
_clients = LoopPool()
_CLIENT = object()  # the pool's owner of that client


def _client(base_url: str) -> Any:
    """The running loop's client, pointed at ``base_url`` (a copy sharing its HTTP pool when it differs)."""

    def make() -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=base_url, api_key="tether")

    client = _clients.get(_CLIENT, make, _close)
    return client if str(client.base_url) == base_url.rstrip("/") + "/" else client.copy(base_url=base_url)


async def _close(client: Any) -> None:
    await client.close()


def _record_tool_error(args: Any) -> None:
    """A ``RunConfig.tool_error_formatter`` that gives a failing tool's span its exception text and leaves the
    message to the model as the SDK's default (returns None)."""
    processor = gate.held()
    if processor is not None and getattr(args, "kind", None) == "tool_exception":
        processor.record_tool_error(getattr(args, "error", None))
    return None


def rollout_run_config(resources: Resources | None = None, **overrides: Any) -> Any:
    """The ``agents.RunConfig`` the adapter runs with (see the module docstring); ``overrides`` are further
    ``RunConfig`` fields. Call it inside a rollout (from a ``run=`` function, in the running event loop)."""
    from agents import OpenAIProvider, RunConfig

    base_url = resources.llm.base_url if resources is not None and resources.llm is not None else None
    if base_url is None:
        scope = current_scope.get()
        if scope is None:
            raise RuntimeError(
                "rollout_run_config() is for code running inside a tether rollout (a run= function); "
                "outside one, pass the Resources whose llm endpoint the agent should call"
            )
        base_url = scope.base_url
    provider = OpenAIProvider(openai_client=_client(base_url), use_responses=False)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    settings: dict[str, Any] = {"model_provider": provider, "tracing_disabled": False}
    if "trace_include_sensitive_data" in fields:
        settings["trace_include_sensitive_data"] = True
    if "tool_error_formatter" in fields:
        settings["tool_error_formatter"] = _record_tool_error
    settings.update(overrides)
    return RunConfig(**settings)


class OpenAIAgentsAdapter(Adapter):
    """Runs OpenAI Agents SDK agents; captures model and tool calls with the agent that made them."""

    name = "openai_agents"
    extra = "openai-agents"
    agent_types = (("agents.agent", "Agent"), ("agents", "Agent"))

    def __init__(self) -> None:
        super().__init__()
        self._responses_default: bool | None = None

    def _instrument(self, sink: SpanSink) -> None:
        import agents

        shared = responses_default()  # checked before anything is installed
        processor = gate.hold()
        processor.sink = sink
        add_agent_resolver(agent_name)
        self._responses_default = shared.get_use_responses_by_default()
        agents.set_default_openai_api("chat_completions")

    def _repoint(self, sink: SpanSink) -> None:
        processor = gate.held()
        if processor is not None:
            processor.sink = sink  # spans go to the latest sink; nothing else changes

    def uninstrument(self) -> None:
        _clients.close_for_running_loop()  # made by run(), instrumented or not
        super().uninstrument()

    def _uninstrument(self) -> None:
        remove_agent_resolver(agent_name)
        if self._responses_default is not None:
            responses_default().set_use_responses_by_default(self._responses_default)
            self._responses_default = None
        gate.release()

    @contextlib.contextmanager
    def run_scope(self, agent: Any) -> Iterator[None]:
        """Hold the upload gate: nothing about this run may reach the SDK's trace uploader, even when the
        adapter is not instrumented (the runner holds the endpoint redirect)."""
        gate.hold()
        try:
            yield
        finally:
            gate.release()

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        from agents import Runner

        config = rollout_run_config(resources)
        context, why_none = default_context(agent)
        with self.run_scope(agent):
            try:
                result = await Runner.run(agent, input=task_input(task), context=context, run_config=config)
            except Exception as exc:
                needed = explain(exc, agent, why_none)
                if needed is None:
                    raise
                raise needed from exc
        return result.final_output
