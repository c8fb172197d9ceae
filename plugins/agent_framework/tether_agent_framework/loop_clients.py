"""Per-event-loop ``AsyncOpenAI`` clients for Agent Framework's OpenAI chat clients, inside rollouts.

``OpenAIChatClient`` and ``OpenAIChatCompletionClient`` build one ``openai.AsyncOpenAI`` in their constructor
and keep it as ``.client``; its pool of HTTP connections binds to the event loop that first used it, and
``Trainer.dev``, ``evaluate`` and ``fit`` each run their own loop, so a client built at import time would fail
the second loop with "Event loop is closed". While the adapter is instrumented, ``.client`` on those classes is
a data descriptor: inside a rollout (``tether.capture.context.current_scope`` set, in a running loop) it returns
a copy of the instance's own ``AsyncOpenAI`` with an HTTP client made for the running loop
(``tether.plugin.loop_pool``: one per client and loop, closed when the runner stops); everywhere else it returns
the instance's own client, untouched. Setting ``.client`` writes the instance's own attribute as before.
``uninstall`` removes the descriptor (only if it is still tether's).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from tether.capture.context import current_scope
from tether.plugin.loop_pool import LoopPool

#: (module, class) of the chat clients whose ``.client`` is an ``AsyncOpenAI``; looked up in sys.modules
CLIENT_CLASSES = (
    ("agent_framework_openai._chat_client", "RawOpenAIChatClient"),
    ("agent_framework_openai._chat_completion_client", "RawOpenAIChatCompletionClient"),
)
ATTRIBUTE = "client"


class _PerLoopClient:
    """The ``client`` data descriptor (see the module docstring)."""

    def __init__(self, pool: LoopPool) -> None:
        self.pool = pool

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        own = obj.__dict__.get(ATTRIBUTE)
        if own is None or current_scope.get() is None or not _is_async_openai(own):
            return own
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return own
        return self.pool.get(own, lambda: _copy(own), _close)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[ATTRIBUTE] = value

    def __delete__(self, obj: Any) -> None:
        del obj.__dict__[ATTRIBUTE]


def _copy(client: Any) -> Any:
    import openai

    return client.copy(http_client=openai.DefaultAsyncHttpxClient())


async def _close(client: Any) -> None:
    await client.close()


def _is_async_openai(obj: Any) -> bool:
    openai = sys.modules.get("openai")
    cls = getattr(openai, "AsyncOpenAI", None)
    return isinstance(cls, type) and isinstance(obj, cls)


class LoopClients:
    """Installs and removes the descriptor on the chat client classes that are imported."""

    def __init__(self) -> None:
        self.pool = LoopPool()
        self._installed: list[tuple[type, _PerLoopClient]] = []

    def install(self) -> None:
        for module_name, class_name in CLIENT_CLASSES:
            cls = getattr(sys.modules.get(module_name), class_name, None)
            if not isinstance(cls, type) or ATTRIBUTE in vars(cls):
                continue  # not imported (nothing built from it), or the class has its own attribute
            descriptor = _PerLoopClient(self.pool)
            setattr(cls, ATTRIBUTE, descriptor)
            self._installed.append((cls, descriptor))

    def uninstall(self) -> None:
        while self._installed:
            cls, descriptor = self._installed.pop()
            if vars(cls).get(ATTRIBUTE) is descriptor:
                delattr(cls, ATTRIBUTE)

    def close_for_running_loop(self) -> None:
        self.pool.close_for_running_loop()
