"""The toy agents the runner's tests drive (``test_runner.py``, ``test_runner_lifecycle.py``): an adapter
whose agents are plain dicts and which calls the proxy URL it is given, its plugin, and ``Trainer.dev`` on the
fake LLM."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import aiohttp

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.plugin.adapters import Adapter
from tether.plugin.manager import build, reset_plugins
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.types import Resources, SpanKind


class DictAgentAdapter(Adapter):
    """Agents are dicts {"name": ..., "calls": n}: each run makes n chat calls to the rollout's endpoint,
    emits a tool span per tool call, and returns the last answer."""

    name = "dict-agent"

    def accepts(self, agent: Any) -> bool:
        return isinstance(agent, dict) and "calls" in agent

    async def run(self, agent: dict[str, Any], task: Any, resources: Resources) -> Any:
        if agent.get("raise"):
            raise RuntimeError(agent["raise"])
        assert resources.llm is not None
        answer = None
        async with aiohttp.ClientSession() as session:
            for _ in range(agent["calls"]):
                body = {"model": "m", "messages": [{"role": "user", "content": str(task)}]}
                headers = {"X-Tether-Agent": agent["name"]}
                async with session.post(
                    f"{resources.llm.base_url}/chat/completions", json=body, headers=headers
                ) as r:
                    data = await r.json()
                    if r.status != 200 and agent.get("swallow_errors"):  # an agent that carries on regardless
                        return None
                    assert r.status == 200, data
                message = data["choices"][0]["message"]
                for call in message.get("tool_calls") or []:
                    function = call["function"]
                    self.sink.emit(
                        SpanKind.TOOL,
                        function["name"],
                        spans.tool_attributes(function["name"], function["arguments"], call_id=call["id"]),
                        agent_name=agent["name"],
                    )
                answer = message.get("content")
        if agent.get("emit"):
            tether.emit_reward(agent["emit"], agent=agent.get("emit_for"))
        return answer


class DictAgentPlugin:
    @tether.hookimpl
    def register_adapters(self, register: Any) -> None:
        register(DictAgentAdapter())


@contextlib.contextmanager
def dict_agent_plugins() -> Iterator[None]:
    """The plugin manager with only the dict agents' adapter, for the block."""
    plugins = build(entry_points=False)
    plugins.register(DictAgentPlugin(), name="dict-agent")
    reset_plugins(plugins)
    try:
        yield
    finally:
        reset_plugins()


def echo(request: dict[str, Any]) -> Reply:
    question = request["messages"][-1]["content"]
    if "tool" in question:
        return tool_call("add", {"a": 1, "b": 2})
    return text(f"answer to {question}")


async def dev(agent: Any, tasks: list[Any], repeats: int = 1, **trainer: Any) -> Any:
    async with FakeLLM(handler=echo) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await tether.Trainer(model=backend, **trainer).adev(agent, tasks, repeats=repeats)
        finally:
            await backend.close()
