"""The pydantic_ai plugin's private seams: one that a release moved fails instrumentation with ``SeamMissing``,
naming the installed version, before anything is installed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.tool_manager import ToolManager

from tether.capture import context
from tether.capture.patching import SeamMissing
from tether_pydantic_ai import PydanticAIAdapter


class _Sink:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("owner", "name"), [(ToolManager, "_execute_tool_call_impl"), (AbstractAgent, "_infer_name")]
)
def test_a_moved_seam_fails_before_anything_is_installed(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str
) -> None:
    infer = AbstractAgent.__dict__["_infer_name"]
    monkeypatch.delattr(owner, name)
    adapter = PydanticAIAdapter()
    with pytest.raises(SeamMissing, match=r"pydantic-ai-slim .*2\.\d+"):
        adapter.instrument(_Sink())
    assert not adapter.instrumented and not context._agent_resolvers
    if owner is not AbstractAgent:
        assert AbstractAgent.__dict__["_infer_name"] is infer
