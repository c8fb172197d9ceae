"""The adapter contract that framework plugins implement, and the span sink adapters write to.

An ``Adapter`` knows one agent framework: whether an object belongs to it (``accepts``, which looks in
``sys.modules`` and never imports the framework; by default an instance of one of its ``agent_types``), how
to capture its model and tool calls (``instrument`` a sink, idempotently; ``uninstrument`` exactly), what one
rollout runs (``rollout_copy``: a copy that shares no run state, for frameworks whose objects hold it), how to
run one task on it (``run``), and what must surround any run of it, the user's own ``run=`` included
(``run_scope``). A ``Tracer`` only captures. Both are registered through the hooks in
``tether.plugin.hookspecs`` (``tether.plugin.hookimpls`` builds the usual implementations). This module is the
plugin contract: it imports nothing from tether above ``types``, ``spans``, ``_json`` and ``context``
(``tether.wrap`` builds on it).
"""

from __future__ import annotations

import abc
import contextlib
import json
import sys
from collections.abc import Iterable
from typing import Any, ClassVar

from tether import _json
from tether.plugin.instrument import Instrumentor
from tether.plugin.instrument import SpanSink as SpanSink
from tether.types import Resources


class CannotCopy(TypeError):
    """``Adapter.rollout_copy`` cannot copy this object; the message names ``run=`` as the way to build one
    per task. A wrapped agent with a ``run=`` then hands the user's own object to it."""


class Tracer(Instrumentor, abc.ABC):
    """Captures spans from some instrumentation layer into a sink: ``instrument(sink)`` /
    ``uninstrument()`` come from ``Instrumentor`` (idempotent, exact); a tracer implements ``_instrument``
    and ``_uninstrument``."""

    name: str = ""


class Adapter(Tracer):
    """Runs and captures the agents of one framework."""

    #: ``pip install "tether[<extra>]"`` installs what this adapter needs.
    extra: str | None = None
    #: ``(module, class)`` of the objects this adapter runs, for the default ``accepts``
    agent_types: ClassVar[tuple[tuple[str, str], ...]] = ()

    def accepts(self, agent: Any) -> bool:
        """True if ``agent`` is an object of this adapter's framework. Must not import the framework: look
        in ``sys.modules`` (if the framework is not imported, the agent cannot be one of its objects).
        Default: ``agent`` is an instance (not a class) of one of ``agent_types`` (``instance_of``); an
        adapter without ``agent_types`` overrides this."""
        return instance_of(agent, self.agent_types)

    @abc.abstractmethod
    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        """Run ``agent`` on one task input with ``resources`` (the endpoint is already scoped to the
        rollout) and return the agent's output."""

    def rollout_copy(self, agent: Any) -> Any:
        """What one rollout runs: for a framework whose objects hold run state (a conversation, a running
        flag, an executor), a copy of ``agent`` that shares none with it or with other rollouts' copies, so
        that rollouts are independent and may run concurrently. ``run`` runs one, and a wrapped agent's
        ``run=`` is handed one instead of the user's object. Called in the rollout's event loop; raises
        ``CannotCopy`` for an object it cannot copy. Default: ``agent`` itself (objects without run state)."""
        return agent

    def hint_for(self, agent: Any) -> str | None:
        """When ``accepts(agent)`` is False only for a reason the user can fix (the framework is not imported
        yet), the fix to name in the "no adapter accepts" error, e.g. "pass adapter='x' or import x first";
        else None (the default)."""
        return None

    def run_scope(self, agent: Any) -> contextlib.AbstractContextManager[Any]:
        """What surrounds every run of ``agent`` so that its calls are captured and named: ``run`` enters it,
        and so does a wrapped agent that feeds tasks through the user's ``run=``. Default: nothing. It never
        holds the endpoint redirect: the runner alone does, around each rollout."""
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# -- helpers for adapter authors ---------------------------------------------------------------------------


def loaded_classes(names: Iterable[tuple[str, str]]) -> tuple[type, ...]:
    """The classes named ``(module, class)`` whose modules are imported, looked up in ``sys.modules`` only (a
    framework that is not imported has no objects to run)."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in names)
    return tuple(cls for cls in found if isinstance(cls, type))


def instance_of(agent: Any, names: Iterable[tuple[str, str]]) -> bool:
    """True if ``agent`` is an instance (not a class) of one of the classes ``names`` (``loaded_classes``)."""
    return not isinstance(agent, type) and isinstance(agent, loaded_classes(names))


def json_safe(value: Any) -> Any:
    """A JSON-safe deep copy of ``value`` for a span attribute (``tether._json.jsonable``): what JSON cannot
    hold becomes its text, pydantic models their ``model_dump``."""
    return _json.jsonable(value)


def tool_arguments(raw: Any) -> Any:
    """A tool call's arguments as the model sent them: parsed when they are JSON text, else as given."""
    if isinstance(raw, str):
        try:
            return json_safe(json.loads(raw))
        except ValueError:
            return raw
    return json_safe(raw)
