"""The plain-function adapter and the plugin module: what it accepts (without importing openai), exact
instrumentation, running sync and async functions inside a rollout scope, and the plugin's hooks."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import textwrap
from types import ModuleType
from typing import Any

import pytest
from openai._base_client import BaseClient

import tether
from tether import spans
from tether.capture import redirect
from tether.capture.context import AGENT_HEADER, CALL_ID_HEADER, RolloutScope, agent_scope, rollout_scope
from tether.testing.fake_llm import FakeLLM, text
from tether.types import Resources, SpanKind, Task
from tether_openai import OpenAIFunctionAdapter


class _Sink:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the openai adapter leaves LLM spans to the proxy")


def _echo(request: dict[str, Any]) -> Any:
    return text("echo: " + request["messages"][-1]["content"])


def _scope(llm: FakeLLM, rollout: str = "ro-1") -> RolloutScope:
    return RolloutScope(rollout_id=rollout, attempt_id="at-1", base_url=llm.base_url)


def plain(x: Any) -> Any:
    return x


async def coroutine_function(x: Any) -> Any:
    return x


def generator_function(x: Any) -> Any:
    yield x


class Agent:
    def __call__(self, x: Any) -> Any:
        return x

    def method(self, x: Any) -> Any:
        return x


@pytest.mark.parametrize(
    "agent",
    [
        plain,
        coroutine_function,
        lambda x: x,
        functools.partial(plain),
        functools.partial(functools.partial(plain)),
    ],
    ids=["function", "coroutine function", "lambda", "partial", "nested partial"],
)
def test_accepts_plain_functions(agent: Any) -> None:
    assert OpenAIFunctionAdapter().accepts(agent)


@pytest.mark.parametrize(
    "agent",
    [Agent, Agent(), Agent().method, print, generator_function, functools.partial(Agent()), 42, "plain", None],
    ids=[
        "class",
        "callable instance",
        "bound method",
        "builtin",
        "generator",
        "partial of object",
        "int",
        "str",
        "None",
    ],
)
def test_rejects_other_callables_and_objects(agent: Any) -> None:
    assert not OpenAIFunctionAdapter().accepts(agent)


def test_accepts_never_imports_openai() -> None:
    code = textwrap.dedent(
        """
        import sys
        import tether_openai
        assert "openai" not in sys.modules, "importing the plugin imported openai"
        adapter = tether_openai.OpenAIFunctionAdapter()
        def agent(task):
            return task
        assert adapter.accepts(agent) is False, "openai is not imported, so no agent can use it"
        assert "openai" not in sys.modules, "accepts() imported openai"
        import openai
        assert adapter.accepts(agent) is True
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_wrap_of_a_function_that_imports_openai_later_names_the_fix() -> None:
    code = textwrap.dedent(
        """
        import sys
        import tether
        def agent(task):
            import openai  # imported inside the body: not in sys.modules when wrap() looks
            return task
        assert "openai" not in sys.modules
        try:
            tether.wrap(agent)
        except tether.AdapterNotFound as exc:
            print(exc)
        else:
            raise SystemExit("wrap accepted a function although openai is not imported")
        print("adapter:", tether.wrap(agent, adapter="openai").adapter.name)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pass adapter='openai' or import openai first" in done.stdout
    assert "pip install" not in done.stdout, "unrelated extras listed for a plain function"
    assert done.stdout.strip().endswith("adapter: openai")


def test_instrument_is_idempotent_and_uninstrument_exact() -> None:
    original = BaseClient.__dict__["_build_request"]
    adapter = OpenAIFunctionAdapter()
    adapter.uninstrument()  # never instrumented: no-op
    adapter.instrument(_Sink())
    adapter.instrument(_Sink())
    assert redirect._listeners == [adapter._tools]
    # instrumenting only listens: the runner alone holds the redirect, around each rollout
    assert BaseClient.__dict__["_build_request"] is original and not redirect.is_installed()
    adapter.uninstrument()
    assert redirect._listeners == [] and BaseClient.__dict__["_build_request"] is original
    adapter.uninstrument()
    assert redirect._listeners == []


async def test_run_sync_function_in_a_thread_inside_the_scope(agent_module: ModuleType) -> None:
    adapter = OpenAIFunctionAdapter()
    async with FakeLLM(handler=_echo) as llm:
        with redirect.held(), rollout_scope(_scope(llm)), agent_scope("solo"):  # as the runner does
            out = await adapter.run(agent_module.answer, Task(input="2+2?"), Resources(version=1))
    assert out == "echo: 2+2?"
    (req,) = llm.requests
    assert req.headers[AGENT_HEADER] == "solo"
    assert not redirect.is_installed()


async def test_run_coroutine_function_and_partial(agent_module: ModuleType) -> None:
    adapter = OpenAIFunctionAdapter()

    async def agent(question: str, *, suffix: str) -> str:
        return await agent_module.aanswer(question + suffix)

    async with FakeLLM(handler=_echo) as llm:
        with redirect.held(), rollout_scope(_scope(llm)):
            out = await adapter.run(functools.partial(agent, suffix="!"), "hi", Resources(version=1))
    assert out == "echo: hi!"
    assert [r.json["messages"][0]["content"] for r in llm.requests] == ["hi!"]


async def test_run_propagates_the_agents_error() -> None:
    def broken(task: Any) -> Any:
        raise ValueError(f"bad task {task}")

    with pytest.raises(ValueError, match="bad task 7"):
        await OpenAIFunctionAdapter().run(broken, 7, Resources(version=1))
    assert not redirect.is_installed()


class _UnheldAdapter(tether.Adapter):
    """Runs ``agent(task)`` in a worker thread and holds nothing itself: only the runner holds the redirect."""

    name = "unheld"

    def __init__(self) -> None:
        self.held_during_run: list[bool] = []

    def accepts(self, agent: Any) -> bool:
        return False

    def instrument(self, sink: Any) -> None:
        pass

    def uninstrument(self) -> None:
        pass

    async def run(self, agent: Any, task: Any, resources: Resources) -> Any:
        self.held_during_run.append(redirect.is_installed())
        return await asyncio.to_thread(agent, task)


async def test_the_runner_holds_the_redirect_around_each_rollout_whatever_the_adapter(
    agent_module: ModuleType,
) -> None:
    adapter = _UnheldAdapter()
    agent = tether.wrap(
        agent_module.answer, adapter=adapter, reward=lambda task, out: float(out == f"echo: {task}")
    )
    async with FakeLLM(handler=_echo) as llm:
        report = await tether.Trainer(model=llm.base_url).adev(agent, ["via runner", "again"])
    assert [r.reward for r in report] == [1.0, 1.0], [r.error for r in report]
    assert adapter.held_during_run == [True, True]
    assert not redirect.is_installed()
    assert len(llm.requests) == 2


def test_plugin_is_loaded_through_its_entry_point() -> None:
    from tether.plugin.manager import build

    plugins = build()
    assert "openai" in {p.name for p in plugins.loaded()}
    assert "openai" not in {u.name for u in plugins.unavailable}
    adapter = plugins.adapter_named("openai")
    assert isinstance(adapter, OpenAIFunctionAdapter) and adapter.extra == "openai"
    found = tether.get_plugins().adapter_for(plain)
    assert isinstance(found, OpenAIFunctionAdapter) and found.name == "openai"


class _Collect:
    def __init__(self) -> None:
        self.spans: list[tuple[Any, str, dict[str, Any], str | None]] = []

    def emit(
        self, kind: Any, name: str, attributes: dict[str, Any], *, agent_name: str | None = None, **_: Any
    ) -> None:
        self.spans.append((kind, name, attributes, agent_name))


async def test_tool_results_are_reported_once_and_only_inside_the_adapters_runs(agent_module: ModuleType) -> None:
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"k": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "v1"},
    ]

    def two_calls(task: Any) -> str:
        for _ in range(2):  # the same tool result is sent twice: one span
            agent_module.client.chat.completions.create(model="m", messages=history)
        return "done"

    adapter, sink = OpenAIFunctionAdapter(), _Collect()
    adapter.instrument(sink)
    try:
        async with FakeLLM(handler=_echo) as llm:
            with redirect.held(), rollout_scope(_scope(llm)):
                await asyncio.to_thread(two_calls, None)  # not a run of this adapter (e.g. another framework's)
                assert sink.spans == []
                assert await adapter.run(two_calls, "task", Resources(version=1)) == "done"
    finally:
        adapter.uninstrument()
    assert sink.spans == [
        (
            SpanKind.TOOL,
            "lookup",
            {
                spans.TOOL_NAME: "lookup",
                spans.TOOL_ARGUMENTS: {"k": 1},
                spans.TOOL_CALL_ID: "c1",
                spans.TOOL_RESULT: "v1",
                spans.LLM_CALL_ID: llm.requests[2].headers[CALL_ID_HEADER],
            },
            "two_calls",
        )
    ]
    assert {r.headers[AGENT_HEADER] for r in llm.requests[2:]} == {"two_calls"}
