"""Names for the model calls an AutoGen team makes itself, not on behalf of any participant.

A ``SelectorGroupChat`` asks its model which participant speaks next (``SelectorGroupChatManager``'s
``select_speaker``); those calls run in the team's manager, outside every agent's turn, so they would carry no
sub-agent name. While the adapter is instrumented, the manager each ``SelectorGroupChat`` builds runs
``select_speaker`` under the name ``"<team name>.selector"`` (``SelectorGroupChat(..., name=...)``, by default
``"SelectorGroupChat"``): its calls can be named in ``optimize=`` and in policy maps like any sub-agent, and
are served by the frozen model under a map that leaves them out.

The seam is the team's ``_create_group_chat_manager_factory`` (private, present in autogen-agentchat 0.4 to
0.7): the factory it returns is wrapped so that each manager it makes gets the named ``select_speaker``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.capture.context import agent_scope

SELECTOR_SUFFIX = ".selector"


def selector_name(team_name: str) -> str:
    """The sub-agent name of a ``SelectorGroupChat``'s speaker-selection calls."""
    return f"{team_name}{SELECTOR_SUFFIX}"


def make_factory_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``SelectorGroupChat._create_group_chat_manager_factory`` (see the module docstring)."""

    def _create_group_chat_manager_factory(self: Any, *args: Any, **kwargs: Any) -> Any:
        factory = original(self, *args, **kwargs)
        name = selector_name(str(getattr(self, "name", None) or type(self).__name__))

        def make_manager() -> Any:
            manager = factory()
            select = manager.select_speaker

            async def select_speaker(thread: Any) -> Any:
                with agent_scope(name):
                    return await select(thread)

            manager.select_speaker = select_speaker  # this manager only; the class stays as it is
            return manager

        return make_manager

    _create_group_chat_manager_factory.__wrapped__ = original  # type: ignore[attr-defined]
    return _create_group_chat_manager_factory
