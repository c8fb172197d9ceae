"""The example crew run through ``Trainer.dev`` against the fake LLM (via tether's proxy): calls named after
each agent's role (on the proxy's spans, through the request header, and on the event-bus spans), tool
results and errors, selective optimization, a task CrewAI runs in its own thread, concurrent rollouts, the
user's crew left untouched, and the embedded model."""

from __future__ import annotations

import importlib.util
from typing import Any

import agent as example
import pytest
from crewai import Crew, Process, Task
from crewai_script import reply, task

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_crewai import CrewAIOutput, crew_inputs


async def _dev(agent: Any, tasks: list[Any], **trainer: Any) -> DevReport:
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend, n_runners=4, **trainer).adev(agent, tasks)
        finally:
            await backend.close()


def _spans(rollout: Any, kind: SpanKind, name: str | None = None) -> list[Any]:
    return [s for s in rollout.spans if s.kind == kind and (name is None or s.name == name)]


async def test_each_call_carries_its_agents_role() -> None:
    report = await _dev(tether.wrap(example.crew, reward=lambda t, o: 1.0), [task("Paris")])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    roles = ["researcher", "researcher", "writer"]
    assert [t.agent_name for t in rollout.transitions] == roles, str(rollout)
    proxy = _spans(rollout, SpanKind.LLM, spans.LLM_CALL)
    assert [s.agent_name for s in proxy] == roles  # the X-Tether-Agent header, set around each agent's task
    own = _spans(rollout, SpanKind.LLM, "crewai.llm_call")
    assert [s.agent_name for s in own] == roles
    for mine, theirs in zip(own, proxy, strict=True):
        # the exact request (not CrewAI's depth-limited serialisation), joined by the proxy's call id
        assert mine.attributes[spans.CALL_ID] == theirs.attributes[spans.CALL_ID]
        assert mine.attributes[spans.REQUEST_MESSAGES] == theirs.attributes["request"]["messages"]
    assert own[0].attributes[spans.REQUEST_TOOLS][0]["function"]["name"] == "lookup"
    assert own[0].attributes[spans.RESPONSE]["tool_calls"][0]["function"]["name"] == "lookup"
    assert own[2].attributes[spans.RESPONSE] == {
        "role": "assistant",
        "content": "In short: Paris is the capital of France.",
    }
    (tool,) = _spans(rollout, SpanKind.TOOL)
    assert tool.agent_name == "researcher"
    assert tool.attributes == {
        spans.TOOL_NAME: "lookup",
        spans.TOOL_ARGUMENTS: {"topic": "Paris"},
        spans.TOOL_RESULT: "Paris is the capital of France.",
    }
    assert proxy[0].end_time <= tool.start_time <= tool.end_time <= proxy[1].start_time
    assert rollout.output["text"] == "In short: Paris is the capital of France."
    assert [t["agent"] for t in rollout.output["tasks"]] == ["researcher", "writer"]
    assert not report.all_problems, report.all_problems


async def test_a_tool_that_raises_yields_a_tool_span_with_the_error() -> None:
    report = await _dev(tether.wrap(example.crew, reward=lambda t, o: 1.0), [task("Atlantis")])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = _spans(rollout, SpanKind.TOOL)
    assert tool.agent_name == "researcher"
    assert tool.attributes[spans.TOOL_NAME] == "lookup"
    assert tool.attributes[spans.TOOL_ARGUMENTS] == {"topic": "Atlantis"}
    assert "no fact about 'Atlantis'" in tool.attributes[spans.TOOL_ERROR]
    assert spans.TOOL_RESULT not in tool.attributes
    # CrewAI handed the error to the model as the tool's result
    second = rollout.transitions[1]
    assert second.messages[-1]["role"] == "tool" and "no fact about" in second.messages[-1]["content"]


async def test_optimize_selects_calls_by_role() -> None:
    report = await _dev(tether.wrap(example.crew, reward=lambda t, o: 1.0, optimize=["writer"]), [task("Mars")])
    (rollout,) = report.rollouts
    assert [(t.agent_name, t.trainable) for t in rollout.transitions] == [
        ("researcher", False),
        ("researcher", False),
        ("writer", True),
    ]


async def test_a_task_crewai_runs_in_its_own_thread_keeps_the_role_and_the_rollout() -> None:
    # async_execution: CrewAI runs the task in a threading.Thread (with a copy of the context)
    research = Task(
        description=example.research.description,
        expected_output=example.research.expected_output,
        agent=example.researcher,
        async_execution=True,
    )
    write = Task(
        description=example.write.description,
        expected_output=example.write.expected_output,
        agent=example.writer,
        context=[research],
    )
    crew = Crew(agents=[example.researcher, example.writer], tasks=[research, write], process=Process.sequential)
    report = await _dev(tether.wrap(crew, reward=lambda t, o: 1.0), [task("Nile"), task("Everest")])
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert [s.agent_name for s in _spans(rollout, SpanKind.LLM, spans.LLM_CALL)] == [
            "researcher",
            "researcher",
            "writer",
        ]
        assert {s.rollout_id for s in rollout.spans} == {rollout.rollout.rollout_id}
        (tool,) = _spans(rollout, SpanKind.TOOL)
        assert tool.attributes[spans.TOOL_ARGUMENTS] == {"topic": rollout.rollout.input["topic"]}


async def test_reward_receives_the_crews_output_and_the_users_crew_is_not_run() -> None:
    seen: list[Any] = []

    def reward(t: dict[str, str], output: Any) -> float:
        seen.append(output)
        return float(example.FACTS[t["topic"].lower()] in str(output))

    report = await _dev(tether.wrap(example.crew, reward=reward), [task("Python"), task("Mars")])
    assert sorted(r.reward for r in report.rollouts) == [1.0, 1.0]
    assert all(isinstance(o, CrewAIOutput) and o.crew_output is not None for o in seen)
    # each rollout ran on its own copy: the user's tasks keep their templates and have no output
    assert example.research.description == "Look up {topic} with the lookup tool and report the fact."
    assert example.research.output is None and example.write.output is None


def test_task_inputs() -> None:
    assert crew_inputs({"topic": "Paris"}) == {"topic": "Paris"}
    assert crew_inputs("hello") == {"input": "hello"}
    with pytest.raises(TypeError, match="run="):
        crew_inputs(42)


_EMBEDDED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tether.models.embedded")


@pytest.mark.skipif(not _EMBEDDED, reason='the embedded model needs torch: pip install "tether[embedded]"')
def test_embedded_model_calls_are_captured_with_token_ids_and_roles() -> None:
    from tether.models.embedded import EmbeddedBackend

    # untrained: only capture is checked, not the answers; short replies keep the test quick
    agent = tether.wrap(example.crew, reward=lambda t, o: 0.0)
    report = Trainer(model=EmbeddedBackend(default_max_tokens=24), n_runners=2).dev(
        agent, [task("Paris"), task("Mars")]
    )
    assert len(report.rollouts) == 2
    for rollout in report.rollouts:
        assert rollout.transitions, str(rollout)
        assert rollout.transitions[0].agent_name == "researcher"
        assert {t.agent_name for t in rollout.transitions} <= {"researcher", "writer"}
        for t in rollout.transitions:
            assert t.prompt_token_ids and t.response_token_ids
            assert t.logprobs is not None and len(t.logprobs) == len(t.response_token_ids)
        assert {s.rollout_id for s in rollout.spans} == {rollout.rollout.rollout_id}
