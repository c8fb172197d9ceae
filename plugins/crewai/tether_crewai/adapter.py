"""The CrewAI adapter: runs a ``Crew`` on tasks and captures its model and tool calls.

``CrewAIAdapter.run(crew, task, resources)`` runs ``crew.copy().kickoff(inputs=...)`` in a worker thread
(``asyncio.to_thread``, which copies the context, so the rollout's endpoint redirect and scope carry over).
A ``Crew`` keeps run state (its tasks interpolate the inputs in place, its agents keep executors and
usage counters), so each rollout runs on CrewAI's own per-input copy (``rollout_copy``) — as
``Crew.kickoff_for_each`` does — and the user's crew is never run; a ``run=`` function gets such a copy
too. The inputs are the task itself when it is a dict (its keys fill the ``{placeholders}`` of the agents'
and tasks' texts), ``{"input": text}`` for a string.

It returns a ``CrewAIOutput``: a ``tether.plugin.tasks.RunOutput`` (a ``dict``, stored as JSON) with

- ``"text"`` — the crew's final answer (``CrewOutput.raw``),
- ``"tasks"`` — each task's ``{"agent", "description", "text"}`` in order,

and the raw ``CrewOutput`` as ``.crew_output``. ``str(output)`` is the final text.

Calls converting an agent's answer to a task's ``output_json`` / ``output_pydantic`` are named
``"<agent role>.converter"``. Capture is in ``tether_crewai.capture``; model requests reach tether's proxy
through tether's endpoint redirect (CrewAI's native OpenAI provider is an ``openai`` SDK client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tether.capture import redirect
from tether.plugin.adapters import Adapter, CannotCopy, SpanSink
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput
from tether.types import Resources, Task
from tether_crewai.capture import EventHandlers, RequestLog, make_execute_wrapper, make_export_wrapper

#: seconds to wait for CrewAI's handler thread pool after a kickoff
FLUSH_TIMEOUT_S = 30.0

_PATCHED = ("execute_task", "aexecute_task")
#: where a task's answer becomes its output_json / output_pydantic: run as "<role>.converter"
_EXPORTS = ("_export_output", "_aexport_output")


class CrewAIOutput(RunOutput):
    """What ``CrewAIAdapter.run`` returns: ``{"text", "tasks"}`` plus ``.crew_output``."""

    crew_output: Any = None


def crew_inputs(task: Any) -> dict[str, Any]:
    """The ``inputs=`` of ``kickoff`` for a task input (see the module docstring)."""
    if isinstance(task, Task):
        task = task.input
    if isinstance(task, dict):
        return dict(task)
    if isinstance(task, str):
        return {"input": task}
    raise TypeError(
        f"a CrewAI task must be a dict of the crew's inputs (its {{placeholders}}) or a string (given as "
        f'{{"input": ...}}), got {type(task).__name__}; pass run=lambda crew, task: crew.kickoff(inputs=...) '
        "to tether.wrap to feed it yourself (it gets the rollout's copy of the crew)"
    )


class CrewAIAdapter(Adapter):
    """Runs and captures CrewAI crews."""

    name = "crewai"
    extra = "crewai"
    agent_types = (("crewai.crew", "Crew"),)

    def __init__(self) -> None:
        super().__init__()
        self._requests = RequestLog()
        self._handlers: list[tuple[type, Callable[[Any, Any], None]]] = []

    # -- capture ------------------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        from crewai import Agent
        from crewai import Task as CrewTask
        from crewai.events import crewai_event_bus

        handlers = EventHandlers(lambda: self.sink, self._requests).handlers()
        for event_type, handler in handlers:
            crewai_event_bus.on(event_type)(handler)
        self._handlers = handlers
        for owner, attrs, wrapper in (
            (Agent, _PATCHED, make_execute_wrapper),
            (CrewTask, _EXPORTS, make_export_wrapper),
        ):
            for attr in attrs:
                original = owner.__dict__.get(attr)
                if original is not None and not Patch.is_patch(original):
                    self._patch(Patch(owner, attr, wrapper))
        _add_request_listener(self._requests)

    def _uninstrument(self) -> None:
        from crewai.events import crewai_event_bus

        _remove_request_listener(self._requests)
        for event_type, handler in self._handlers:
            crewai_event_bus.off(event_type, handler)
        self._handlers = []
        self._requests.clear()

    # -- running ------------------------------------------------------------------------------------------

    def rollout_copy(self, agent: Any) -> Any:
        """CrewAI's own copy of the crew (``Crew.copy``, as ``kickoff_for_each`` makes): what ``run`` kicks off,
        and what a ``run=`` function gets, so ``crew.kickoff(inputs=...)`` is safe in concurrent rollouts."""
        try:
            return agent.copy()
        except Exception as exc:
            raise CannotCopy(
                f"CrewAI could not copy the crew for a rollout ({type(exc).__name__}: {exc}); pass "
                "run=lambda crew, task: build_my_crew().kickoff(inputs=task) to tether.wrap to build one per task"
            ) from exc

    async def run(self, agent: Any, task: Any, resources: Resources) -> CrewAIOutput:
        inputs = crew_inputs(task)
        crew = self.rollout_copy(agent)
        result = await asyncio.to_thread(_kickoff, crew, inputs)
        return summarize(result)


def _kickoff(crew: Any, inputs: dict[str, Any]) -> Any:
    from crewai.events import crewai_event_bus

    try:
        return crew.kickoff(inputs=inputs)
    finally:
        # CrewAI's handlers run on its thread pool: let them emit this rollout's spans before it closes
        crewai_event_bus.flush(timeout=FLUSH_TIMEOUT_S)


def summarize(result: Any) -> CrewAIOutput:
    """A ``CrewAIOutput`` from a CrewAI ``CrewOutput``."""
    tasks = [
        {
            "agent": getattr(t, "agent", None),
            "description": getattr(t, "description", None),
            "text": getattr(t, "raw", None),
        }
        for t in getattr(result, "tasks_output", None) or []
    ]
    # not CrewOutput.token_usage: a copied crew's agents share their LLM's counters with every other copy
    output = CrewAIOutput(text=str(getattr(result, "raw", result) or ""), tasks=tasks)
    output.crew_output = result
    return output


def _add_request_listener(listener: RequestLog) -> None:
    redirect.add_listener(listener)


def _remove_request_listener(listener: RequestLog) -> None:
    redirect.remove_listener(listener)
