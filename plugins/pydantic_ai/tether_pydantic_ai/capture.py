"""What the ``pydantic_ai`` plugin installs while it captures: the agent name of each model request, a name for
agents the user left unnamed, and a ``tool`` span for each tool call.

- **Names.** PydanticAI keeps the running agent's ``RunContext`` in a context variable
  (``pydantic_ai._run_context.get_current_run_context()``), set around every model request, the sub-agent's
  own run inside a delegating tool included. ``agent_name()`` reads ``ctx.agent.name`` from it; tether's
  endpoint redirect calls it (an agent resolver) for the ``X-Tether-Agent`` header of each request, so the
  proxy's span of the call carries the name.
- **Unnamed agents.** An ``Agent`` without ``name=`` is named by PydanticAI on its first run after a variable
  in the *calling* frame (``AbstractAgent._infer_name``): the medical example's specialists, run from a tool as
  ``specialist_agent.run(...)``, would all be ``"specialist_agent"``, and an agent run by tether ``"agent"``.
  While instrumented, an unnamed agent is named after the module-level variable that holds it
  (``tether.plugin.naming.global_name``: ``cardiology_agent``), falling back to PydanticAI's own inference.
  Either way the agent object keeps the name, as PydanticAI's own inference does.
- **Tools.** Every function-tool call goes through ``ToolManager._execute_tool_call_impl`` (validated
  arguments, the call's ``RunContext``); the wrapper emits a ``tool`` span named by the calling agent with the
  validated arguments and the result, or the error (``ModelRetry``, an exception). Output tools
  (``final_result``) are not tool spans: they are the model's answer.

These are private seams (``SEAMS``); ``check_seams()`` raises ``SeamMissing`` naming the installed version if a
release moves one, before anything is installed. Importing this module does not import PydanticAI.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

from tether import spans
from tether.capture.context import current_scope
from tether.capture.patching import Seam
from tether.plugin.adapters import SpanSink, json_safe
from tether.plugin.naming import global_name
from tether.types import SpanKind

_SEAM = Seam("pydantic-ai-slim", "tether_pydantic_ai.capture")
#: (module, attribute, names it must have) of the private seams used
SEAMS = (
    ("pydantic_ai._run_context", None, ("get_current_run_context",)),
    ("pydantic_ai.tool_manager", "ToolManager", ("_execute_tool_call_impl",)),
    ("pydantic_ai.agent.abstract", "AbstractAgent", ("_infer_name",)),
)


def check_seams() -> None:
    """``SeamMissing`` (naming the installed version) unless every seam in ``SEAMS`` is where it was."""
    for module_name, attribute, names in SEAMS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise _SEAM.missing(f"{module_name} cannot be imported ({exc})") from exc
        owner = module if attribute is None else getattr(module, attribute, None)
        if owner is None:
            raise _SEAM.missing(f"{module_name}.{attribute} is gone")
        _SEAM.require(owner, *names)


def agent_name() -> str | None:
    """The name of the PydanticAI agent whose run is current in this context (an agent resolver)."""
    module = sys.modules.get("pydantic_ai._run_context")
    if module is None:
        return None
    ctx = module.get_current_run_context()
    agent = getattr(ctx, "agent", None) if ctx is not None else None
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else None


def infer_name_wrapper(original: Callable[..., None]) -> Callable[..., None]:
    """``AbstractAgent._infer_name`` naming an unnamed agent after its module-level variable first."""

    @functools.wraps(original)
    def infer_name(self: Any, function_frame: Any) -> None:
        caller = getattr(function_frame, "f_back", None)
        name = global_name(self, getattr(caller, "f_globals", None))
        if name is not None:
            self.name = name
            return
        original(self, function_frame)

    return infer_name


def tool_wrapper(original: Callable[..., Any], sink: Callable[[], SpanSink | None]) -> Callable[..., Any]:
    """``ToolManager._execute_tool_call_impl`` emitting a ``tool`` span per call inside a rollout."""

    @functools.wraps(original)
    async def execute(self: Any, validated: Any, *args: Any, **kwargs: Any) -> Any:
        target = sink()
        if target is None or current_scope.get() is None:
            return await original(self, validated, *args, **kwargs)
        call = validated.call
        agent = getattr(getattr(validated, "ctx", None), "agent", None)
        name = getattr(agent, "name", None)
        start = time.time()
        try:
            result = await original(self, validated, *args, **kwargs)
        except BaseException as exc:
            _emit(target, call, validated, name, start, error=_error_text(exc))
            raise
        _emit(target, call, validated, name, start, result=result)
        return result

    return execute


def _emit(
    sink: SpanSink,
    call: Any,
    validated: Any,
    agent: str | None,
    start: float,
    *,
    result: Any = None,
    error: str | None = None,
) -> None:
    arguments = validated.validated_args if validated.validated_args is not None else call.args
    attributes = spans.tool_attributes(
        str(call.tool_name), json_safe(arguments), result=json_safe(result), error=error, call_id=call.tool_call_id
    )
    sink.emit(SpanKind.TOOL, str(call.tool_name), attributes, agent_name=agent, start_time=start)


def _error_text(exc: BaseException) -> str:
    cause = exc.__cause__ if exc.__cause__ is not None else exc  # ToolRetryError wraps the tool's ModelRetry
    return f"{type(cause).__name__}: {cause}"
