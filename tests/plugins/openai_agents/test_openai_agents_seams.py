"""The Agents SDK's private module that holds its default OpenAI API (``agents.models._openai_shared``) is checked
before the adapter installs anything: a release that moves it fails ``instrument`` loudly, naming the installed
openai-agents version and the module to update, and leaves nothing behind. Each test removes the seam from the
real SDK, as such a release would."""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

import pytest
from agents.models import _openai_shared
from agents.tracing import get_trace_provider

from tether.capture import context
from tether.capture.patching import SeamMissing
from tether_openai_agents import OpenAIAgentsAdapter, gate
from tether_openai_agents.adapter import responses_default

VERSION = importlib.metadata.version("openai-agents")


class _Sink:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass


def _state() -> Any:
    return (gate.hold_count(), gate.processors(get_trace_provider()), tuple(context._agent_resolvers))


def test_the_seam_is_where_the_adapter_expects_it() -> None:
    assert responses_default() is _openai_shared
    adapter, before = OpenAIAgentsAdapter(), _openai_shared.get_use_responses_by_default()
    adapter.instrument(_Sink())
    try:
        assert _openai_shared.get_use_responses_by_default() is False  # chat completions while instrumented
    finally:
        adapter.uninstrument()
    assert _openai_shared.get_use_responses_by_default() == before


def test_a_moved_getter_fails_instrument_loudly_and_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _state()
    monkeypatch.delattr(_openai_shared, "get_use_responses_by_default")
    adapter = OpenAIAgentsAdapter()
    with pytest.raises(
        SeamMissing,
        match=rf"openai-agents {VERSION}: agents\.models\._openai_shared has no get_use_responses_by_default; "
        r"tether_openai_agents\.adapter needs updating",
    ):
        adapter.instrument(_Sink())
    assert not adapter.instrumented and _state() == before


def test_a_moved_module_fails_instrument_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _state()
    monkeypatch.setitem(sys.modules, "agents.models._openai_shared", None)  # import fails, as if it were gone
    with pytest.raises(SeamMissing, match=rf"openai-agents {VERSION}: .*_openai_shared cannot be imported"):
        OpenAIAgentsAdapter().instrument(_Sink())
    assert _state() == before
