"""LangChain runnables wrap with one call and are captured through LangChain's callbacks: an ``AgentExecutor``
(``langchain_classic``), an LCEL chain that calls a tool, sub-agents named by their runnables, a ``create_agent``
graph — each through ``Trainer.dev`` against the fake LLM, with tool calls and agent names. And the install
hint an unaccepted LangChain agent gets when the plugin's packages are missing."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import langchain_agents as agents
from langchain_script import question, reply

import tether
from tether import spans as schema
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, Span, SpanKind
from tether_langchain import LangChainAdapter, task_input


async def _dev(agent: Any, tasks: list[Any], **wrap_kwargs: Any) -> DevReport:
    async with FakeLLM(handler=reply) as llm:
        wrapped = tether.wrap(agent, reward=lambda task, output: 1.0, **wrap_kwargs)
        assert wrapped.adapter.name == "langchain"
        backend = RemoteBackend(llm.base_url, return_token_ids=True)  # the fake LLM returns token ids
        try:
            return await Trainer(model=backend, n_runners=max(2, len(tasks)), progress=False).adev(wrapped, tasks)
        finally:
            await backend.close()


def _tools(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.kind == SpanKind.TOOL]


def _proxy_names(spans: list[Span]) -> list[str | None]:
    return [s.agent_name for s in spans if is_proxy_llm_span(s)]


async def test_agent_executor_is_captured_with_its_tool_call() -> None:
    report = await _dev(agents.agent_executor, [{"input": question(3)}, question(4)])
    for dev, product in zip(report.rollouts, (21, 28), strict=True):
        assert dev.status == RolloutStatus.SUCCEEDED, dev.error
        assert dev.rollout.output["output"] == f"The result is {product}."  # a str task became {"input": ...}
        # AgentExecutor streams its model calls; both have token ids and the executor's name
        assert [t.agent_name for t in dev.transitions] == ["AgentExecutor", "AgentExecutor"]
        assert all(t.prompt_token_ids and t.response_token_ids for t in dev.transitions)
        assert _proxy_names(dev.spans) == ["AgentExecutor", "AgentExecutor"]  # the header, not a fill-in
        (tool,) = _tools(dev.spans)
        assert tool.agent_name == "AgentExecutor"
        assert tool.attributes[schema.TOOL_NAME] == "multiply"
        assert tool.attributes[schema.TOOL_ARGUMENTS] == {"first_int": product // 7, "second_int": 7}
        assert tool.attributes[schema.TOOL_RESULT] == product
    assert not report.all_problems, report.all_problems


async def test_lcel_tool_chain_is_captured_under_the_chains_name() -> None:
    named = agents.tool_chain.with_config(run_name="multiplier")
    for chain, name in ((agents.tool_chain, "RunnableSequence"), (named, "multiplier")):
        report = await _dev(chain, [question(6)])
        (dev,) = report.rollouts
        assert dev.status == RolloutStatus.SUCCEEDED, dev.error
        assert dev.rollout.output == 42
        (t,) = dev.transitions
        assert t.agent_name == name and t.messages == [{"role": "user", "content": question(6)}]
        (tool,) = _tools(dev.spans)
        assert tool.agent_name == name and tool.attributes[schema.TOOL_RESULT] == 42
        chains = [s.attributes["chain.name"] for s in dev.spans if s.kind == SpanKind.OTHER and s.name == "chain"]
        assert chains == [name]


async def test_sub_agents_are_named_by_their_runnables_and_optimized_by_name() -> None:
    report = await _dev(agents.pipeline, [question(5)], optimize=["solver"])
    (dev,) = report.rollouts
    assert dev.status == RolloutStatus.SUCCEEDED, dev.error
    assert dev.rollout.output["output"] == "The result is 35."
    # the planner (an LCEL chain with run_name) and the solver (an AgentExecutor with name=); the parallel step
    # and the sequence around them are LangChain's plumbing, not agents
    assert [t.agent_name for t in dev.transitions] == ["planner", "solver", "solver"]
    assert [t.trainable for t in dev.transitions] == [False, True, True]
    assert _proxy_names(dev.spans) == ["planner", "solver", "solver"]
    (tool,) = _tools(dev.spans)
    assert tool.agent_name == "solver" and tool.attributes[schema.TOOL_RESULT] == 35


async def test_create_agent_graph_is_named_by_its_name() -> None:
    report = await _dev(agents.calc_agent, [question(6, "plus"), {"messages": [("user", question(2, "plus"))]}])
    for dev, total in zip(report.rollouts, (13, 9), strict=True):
        assert dev.status == RolloutStatus.SUCCEEDED, dev.error
        assert dev.rollout.output["messages"][-1]["content"] == f"The result is {total}."
        # create_agent's model and tools nodes are steps of the one agent named "calculator"
        assert [t.agent_name for t in dev.transitions] == ["calculator", "calculator"]
        assert _proxy_names(dev.spans) == ["calculator", "calculator"]
        (tool,) = _tools(dev.spans)
        assert tool.agent_name == "calculator" and tool.attributes[schema.TOOL_NAME] == "add"
        assert tool.attributes[schema.TOOL_ARGUMENTS] == {"first_int": total - 7, "second_int": 7}


async def test_a_sub_agent_run_by_a_tool_is_named_by_its_own_name() -> None:
    report = await _dev(agents.supervisor, [question(8)])
    (dev,) = report.rollouts
    assert dev.status == RolloutStatus.SUCCEEDED, dev.error
    assert dev.rollout.output["messages"][-1]["content"] == "The expert says: The result is 56."
    names = ["supervisor", "math_expert", "math_expert", "supervisor"]
    assert [t.agent_name for t in dev.transitions] == names
    assert _proxy_names(dev.spans) == names
    # the supervisor called its "math" tool; the expert, run inside that tool, called multiply
    tools = {s.attributes[schema.TOOL_NAME]: s.agent_name for s in _tools(dev.spans)}
    assert tools == {"math": "supervisor", "multiply": "math_expert"}


def test_which_adapter_takes_what() -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    adapter = LangChainAdapter()
    for runnable in (agents.agent_executor, agents.tool_chain, agents.pipeline, agents.calc_agent, agents.model):
        assert adapter.accepts(runnable)
    assert not adapter.accepts(lambda task: task) and not adapter.accepts({"input": "x"})
    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda state: state)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    graph = builder.compile()
    assert not adapter.accepts(graph)  # a StateGraph the user built is the langgraph plugin's
    assert tether.wrap(graph).adapter.name == "langgraph"
    assert tether.wrap(agents.calc_agent).adapter.name == "langchain"


async def test_the_adapter_pickles_without_this_processs_hook() -> None:
    # tether.RayRunners sends the wrapped agent's adapter to its actors; one that has run here still pickles
    adapter = tether.wrap(agents.tool_chain).adapter
    await _dev(agents.tool_chain, [question(2)])
    assert adapter.instrumented is False
    copy = pickle.loads(pickle.dumps(adapter))
    assert isinstance(copy, LangChainAdapter) and copy._hook.handler is None and len(copy._tree) == 0


def test_how_a_string_task_is_fed() -> None:
    assert task_input(agents.agent_executor, "hi") == {"input": "hi"}
    assert task_input(agents.pipeline, "hi") == {"input": "hi"}  # its one required input key
    assert task_input(agents.tool_chain, "hi") == "hi"
    assert task_input(agents.calc_agent, "hi") == {"messages": [{"role": "user", "content": "hi"}]}
    assert task_input(agents.agent_executor, {"input": "x", "chat_history": []}) == {
        "input": "x",
        "chat_history": [],
    }


def test_plugin_import_does_not_import_the_framework() -> None:
    code = (
        "import sys, tether_langchain\n"
        "assert not tether_langchain.LangChainAdapter().accepts(object())\n"
        "frameworks = ('langchain', 'langchain_core', 'langchain_classic', 'langgraph', 'langsmith')\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in frameworks]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


_WITHOUT_LANGCHAIN_OPENAI = textwrap.dedent(
    """
    import json, sys
    sys.modules["langchain_openai"] = None  # as if not installed: the langchain plugin is unavailable
    from langchain_core.agents import AgentFinish
    from langchain_core.runnables import RunnableLambda
    from langchain_classic.agents import AgentExecutor
    import tether
    executor = AgentExecutor(agent=RunnableLambda(lambda x: AgentFinish({"output": "done"}, "done")), tools=[])
    try:
        tether.wrap(executor)
    except tether.AdapterNotFound as exc:
        print(json.dumps({"error": str(exc)}))
    """
)


def test_an_unaccepted_agent_executor_is_told_the_langchain_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LANGCHAIN_OPENAI], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert "langchain_classic.agents.agent.AgentExecutor" in error
    assert 'pip install "tether[langchain]"' in error
    assert "tether[langgraph]" not in error and "tether[crewai]" not in error, error
