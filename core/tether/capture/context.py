"""Context variables that scope a model call to its rollout and sub-agent.

The runner sets ``current_scope`` around each rollout; the endpoint redirect (``tether.capture.redirect``) reads it
on every SDK request to send the request to that rollout's proxy URL (and leaves the client's own URL alone
outside any rollout).
Framework adapters name the sub-agent making a call, either by setting ``current_agent`` around the agent's
turn (``agent_scope``) or by registering a resolver that reads the framework's own context (LangGraph keeps
the running node in its config context variable).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from tether.types import SpanKind


@dataclass(frozen=True, slots=True)
class RolloutScope:
    rollout_id: str
    attempt_id: str
    base_url: str  # the proxy URL for this attempt, ending in /v1
    token: str | None = None  # the proxy's token (sent as ``TOKEN_HEADER``) when it has one


current_scope: ContextVar[RolloutScope | None] = ContextVar("tether_rollout_scope", default=None)
current_agent: ContextVar[str | None] = ContextVar("tether_agent_name", default=None)

_agent_resolvers: list[Callable[[], str | None]] = []


@contextlib.contextmanager
def rollout_scope(scope: RolloutScope) -> Iterator[RolloutScope]:
    token = current_scope.set(scope)
    try:
        yield scope
    finally:
        current_scope.reset(token)


@contextlib.contextmanager
def agent_scope(name: str | None) -> Iterator[None]:
    token = current_agent.set(name)
    try:
        yield
    finally:
        current_agent.reset(token)


def add_agent_resolver(resolver: Callable[[], str | None]) -> None:
    """Register a function that names the running sub-agent from a framework's own context (idempotent)."""
    if resolver not in _agent_resolvers:
        _agent_resolvers.append(resolver)


def remove_agent_resolver(resolver: Callable[[], str | None]) -> None:
    if resolver in _agent_resolvers:
        _agent_resolvers.remove(resolver)


def current_agent_name() -> str | None:
    """The sub-agent making the current call: an explicit ``agent_scope`` wins, then the resolvers."""
    name = current_agent.get()
    if name:
        return name
    for resolver in _agent_resolvers:
        found = resolver()
        if found:
            return found
    return None


#: HTTP headers the endpoint redirect adds to each redirected request; the proxy records them on the span.
#: The agent header carries the sub-agent name percent-encoded (UTF-8), so any name a framework accepts — a
#: CrewAI role ending in a newline, a node name with spaces or non-ASCII text — is a valid header value.
AGENT_HEADER = "X-Tether-Agent"
CALL_ID_HEADER = "X-Tether-Call-Id"
#: the header that carries a proxy's token (``ProxyServer(token=...)``: a proxy bound beyond loopback)
TOKEN_HEADER = "X-Tether-Token"


def encode_agent_header(name: str) -> str:
    """``name`` as the ``X-Tether-Agent`` header value: percent-encoded UTF-8 (plain ASCII names with no space
    or ``%`` travel unchanged)."""
    return urllib.parse.quote(name, safe="!#$&'()*+,/:;=?@[]^_`{|}~")


def decode_agent_header(value: str | None) -> str | None:
    """The sub-agent name an ``X-Tether-Agent`` header value carries, exactly as the framework wrote it."""
    if not value:
        return None
    return urllib.parse.unquote(value, errors="replace") or None


class SpanSink(Protocol):
    """Where adapters and tracers send what they capture. The sink knows which rollout and attempt is
    current (from context), stamps the span with it, and batches spans to the store."""

    def emit(
        self,
        kind: SpanKind,
        name: str,
        attributes: dict[str, Any],
        *,
        agent_name: str | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        parent_id: str | None = None,
    ) -> None: ...


#: the sink of the running rollout, for ``tether.emit_reward`` / ``emit_span`` called from agent code
current_sink: ContextVar[SpanSink | None] = ContextVar("tether_span_sink", default=None)
