"""The rollout attempts a proxy serves, each with what it changes in its calls before the backend sees them.

``ProxyServer.attempt`` opens one (``OpenAttempt``) and closes it when its block ends; ``OpenAttempt.prepare``
applies it to each of its calls: the sampling that overrides the agent's own (in a seeded attempt each call its
own seed, derived from the attempt's and the call's index) and the system message its rule swaps in
(``tether.proxy.system_messages``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether._seeds import derive_seed
from tether.proxy.system_messages import Replacement, Rule, swap_in

if TYPE_CHECKING:
    from tether.models.base import ChatRequest

#: the sampling parameters an attempt's ``sampling`` overrides in each request (greedy evaluation, the
#: training temperature); others in the mapping are ignored
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "seed")


@dataclass(slots=True)
class OpenAttempt:
    """One open attempt: its sampling overrides, its system-message rule, and its calls so far."""

    sampling: dict[str, Any]
    rule: Rule | None = None
    calls: int = 0

    @classmethod
    def of(cls, sampling: Mapping[str, Any] | None, rule: Rule | None) -> OpenAttempt:
        """An attempt overriding the ``SAMPLING_KEYS`` of ``sampling`` that are set (None values ignored)."""
        overrides = {k: sampling[k] for k in SAMPLING_KEYS if sampling and sampling.get(k) is not None}
        return cls(overrides, dict(rule) if rule else None)

    def prepare(self, chat: ChatRequest, agent: str | None) -> tuple[Replacement, list[int]] | None:
        """Apply the attempt to one of its calls, made by sub-agent ``agent``: its sampling, and the system
        message its rule swaps in (the replacement and the message indices replaced; None when none was)."""
        for name, value in self.sampling.items():
            setattr(chat, name, value)
        if "seed" in self.sampling:  # each call its own seed: the attempt's and its index
            chat.seed = derive_seed(self.sampling["seed"], self.calls)
            self.calls += 1
        return swap_in(self.rule, agent, chat)
