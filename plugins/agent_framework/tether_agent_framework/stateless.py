"""Keeps ``OpenAIChatClient`` (the Responses API) stateless inside rollouts.

By default Agent Framework's Responses client continues a conversation on the server: after the first call of a
run it sends only the new items with ``previous_response_id`` (the id of the last response), unless the run's
options say ``store=False``. tether's proxy stores no responses (each request must carry the whole conversation,
which is also what training needs: every call's full prompt), so it refuses ``previous_response_id``.
Inside a rollout (``tether.capture.context.current_scope`` set) the adapter makes the client's private
``_get_conversation_id(response, store)`` answer None, as it does for ``store=False``: the function-invocation loop
then sends the whole conversation each time. Outside rollouts it is unchanged. ``check()`` raises ``SeamMissing``
naming the installed version when a release moves the method.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from tether.capture.context import current_scope
from tether.capture.patching import Seam

MODULE = "agent_framework_openai._chat_client"
CLASS = "RawOpenAIChatClient"
METHOD = "_get_conversation_id"
_SEAM = Seam("agent-framework-openai", "tether_agent_framework.stateless")


def responses_client_class() -> type | None:
    """The Responses chat client class when its module is imported (else None: nothing to patch), checked."""
    cls = getattr(sys.modules.get(MODULE), CLASS, None)
    if not isinstance(cls, type):
        return None
    _SEAM.require(cls, METHOD)
    _SEAM.require_parameters(getattr(cls, METHOD), "response", "store")
    return cls


def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _get_conversation_id(self: Any, response: Any, store: Any, *args: Any, **kwargs: Any) -> Any:
        if current_scope.get() is not None:
            return None  # a rollout: stateless, the whole conversation each call (as with store=False)
        return original(self, response, store, *args, **kwargs)

    return _get_conversation_id
