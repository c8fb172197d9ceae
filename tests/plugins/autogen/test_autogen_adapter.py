"""The AutoGen adapter on its own: what it accepts (without importing AutoGen), how tasks become text, that
instrumenting leaves a user's own logging of AutoGen events alone, and that it is found through the plugin
manager."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import autogen_calc_agent
import autogen_calc_team
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import EVENT_LOGGER_NAME
from autogen_core.logging import ToolCallEvent

import tether
from tether import spans
from tether.plugin.manager import AdapterNotFound
from tether.types import Task
from tether_autogen import AutoGenAdapter, task_text


class _Sink:
    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []

    def emit(self, kind: Any, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        self.spans.append((kind, name, attributes, kwargs))


def test_accepts_agents_and_teams_only() -> None:
    adapter = AutoGenAdapter()
    assert adapter.accepts(autogen_calc_agent.calculator_agent)
    assert adapter.accepts(autogen_calc_team.team)
    for other in (object(), AssistantAgent, autogen_calc_agent.calculator, autogen_calc_agent.model_client, "x"):
        assert not adapter.accepts(other)


def test_wrap_picks_the_autogen_adapter_and_run_can_override() -> None:
    assert tether.wrap(autogen_calc_team.team).adapter.name == "autogen"
    assert tether.wrap(autogen_calc_agent.calculator_agent, adapter="autogen").adapter.name == "autogen"
    with pytest.raises(AdapterNotFound):
        tether.wrap(autogen_calc_agent.model_client)


def test_accepts_does_not_import_autogen() -> None:
    probe = (
        "import sys, json\n"
        "from tether_autogen import AutoGenAdapter\n"
        "print(json.dumps([AutoGenAdapter().accepts(object()), "
        "sorted(m for m in sys.modules if m.startswith(('autogen_agentchat', 'autogen_core', 'autogen_ext')))]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    accepted, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert accepted is False and imported == []


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("What is 1 + 2?", "What is 1 + 2?"),
        ({"question": "What is 1 + 2?", "answer": 3}, "What is 1 + 2?"),
        ({"task": "t", "question": "q"}, "t"),
        ({"input": "i"}, "i"),
        ({"prompt": "p", "n": 1}, "p"),
        ({"a": 1, "b": [2, "x"]}, '{"a": 1, "b": [2, "x"]}'),
        ({"question": 5}, '{"question": 5}'),
        (Task(input={"question": "q"}), "q"),
        (12, "12"),
    ],
)
def test_task_text(task: Any, expected: str) -> None:
    assert task_text(task) == expected


def test_a_users_own_event_logging_is_left_alone() -> None:
    logger = logging.getLogger(EVENT_LOGGER_NAME)
    seen: list[logging.LogRecord] = []

    class _Mine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    mine = _Mine()
    logger.addHandler(mine)
    logger.setLevel(logging.DEBUG)
    try:
        adapter = AutoGenAdapter()
        sink = _Sink()
        adapter.instrument(sink)
        assert logger.level == logging.DEBUG and logger.propagate
        logger.info(ToolCallEvent(tool_name="calculator", arguments={"expression": "1+1"}, result="2"))
        adapter.uninstrument()
        assert logger.handlers == [mine] and logger.level == logging.DEBUG
        assert len(seen) == 1
        # outside a rollout the runner's sink drops spans; this sink records what the handler made
        ((kind, name, attributes, _),) = sink.spans
        assert (kind, name) == ("tool", "calculator")
        assert attributes == {
            spans.TOOL_NAME: "calculator",
            spans.TOOL_ARGUMENTS: {"expression": "1+1"},
            spans.TOOL_RESULT: "2",
        }
    finally:
        logger.removeHandler(mine)
        logger.setLevel(logging.NOTSET)


def test_instrument_quiets_events_it_turned_on_and_restores_exactly() -> None:
    logger = logging.getLogger(EVENT_LOGGER_NAME)
    before = (logger.level, logger.propagate, list(logger.handlers), AssistantAgent.__dict__["on_messages_stream"])
    assert logger.getEffectiveLevel() > logging.INFO  # AutoGen's events are off by default
    adapter = AutoGenAdapter()
    adapter.instrument(_Sink())
    assert logger.isEnabledFor(logging.INFO) and not logger.propagate  # ours only: the root logger sees none
    assert AssistantAgent.__dict__["on_messages_stream"] is not before[3]
    adapter.uninstrument()
    after = (logger.level, logger.propagate, list(logger.handlers), AssistantAgent.__dict__["on_messages_stream"])
    assert after == before


def test_instrument_again_sends_spans_to_the_new_sink() -> None:
    adapter = AutoGenAdapter()
    first, second = _Sink(), _Sink()
    adapter.instrument(first)
    try:
        adapter.instrument(second)
        logging.getLogger(EVENT_LOGGER_NAME).info(ToolCallEvent(tool_name="t", arguments={}, result="r"))
    finally:
        adapter.uninstrument()
    assert not first.spans and len(second.spans) == 1
