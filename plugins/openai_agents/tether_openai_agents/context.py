"""The run context tether's default run gives an OpenAI Agents SDK agent, and what it says when it cannot.

Agents declare the type of their run context by their type parameter: ``Agent[AirlineAgentContext](...)``, as
the SDK's ``customer_service`` example does; its tools and handoff hooks then read and write
``wrapper.context``. ``Runner.run`` without ``context=`` leaves it ``None``, which fails the first hook that
writes to it. So the default run builds one fresh context per rollout from the declared type when the type
can be built without arguments (a pydantic model or dataclass whose fields have defaults). When it cannot, or
an agent with no declared type fails reading a ``None`` context, the rollout's error says so and shows the
``run=`` that passes one.
"""

from __future__ import annotations

from typing import Any

RUN_HINT = (
    "pass run=lambda agent, task: Runner.run(agent, task_input(task), context=MyContext(...), "
    "run_config=rollout_run_config()) to tether.wrap (task_input and rollout_run_config from tether_openai_agents)"
)


class ContextNeeded(RuntimeError):
    """The agent needs a run context that tether's default run cannot build."""


def declared_context_type(agent: Any) -> type | None:
    """The context type an agent declares as ``Agent[T](...)`` (None when it declares none)."""
    alias = getattr(agent, "__orig_class__", None)
    args = getattr(alias, "__args__", ())
    context_type = args[0] if args else None
    return context_type if isinstance(context_type, type) and context_type is not type(None) else None


def default_context(agent: Any) -> tuple[Any, str | None]:
    """A fresh context for one run of ``agent`` and, when there is none to give, why (None: no need)."""
    context_type = declared_context_type(agent)
    if context_type is None:
        return None, None
    try:
        return context_type(), None
    except Exception as exc:  # required fields, or a type that is not meant to be built bare
        return None, f"{context_type.__name__}() failed: {type(exc).__name__}: {exc}"


def explain(exc: BaseException, agent: Any, why: str | None) -> ContextNeeded | None:
    """A ``ContextNeeded`` for a run that failed for want of a context, else None."""
    context_type = declared_context_type(agent)
    if context_type is not None and why is not None:
        return ContextNeeded(
            f"agent {getattr(agent, 'name', agent)!r} declares a run context of type {context_type.__name__} "
            f"(Agent[{context_type.__name__}]), which tether's default run could not build ({why}), and its run "
            f"failed ({type(exc).__name__}: {exc}); {RUN_HINT}"
        )
    if context_type is None and isinstance(exc, AttributeError) and "'NoneType'" in str(exc):
        return ContextNeeded(
            f"agent {getattr(agent, 'name', agent)!r} failed with {type(exc).__name__}: {exc} — if its tools or "
            f"handoff hooks use the run context (RunContextWrapper.context), tether's default run passes none "
            f"unless the agent declares its type as Agent[MyContext](...) with a MyContext() that builds without "
            f"arguments; or {RUN_HINT}"
        )
    return None
