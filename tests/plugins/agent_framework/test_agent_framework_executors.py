"""A workflow executor that calls a chat client itself (no ``Agent``) is named by its executor id, so
``optimize=`` can name it; an agent run inside a workflow keeps its own name."""

from __future__ import annotations

from typing import Any, Never

from agent_framework import Agent, Executor, Message, WorkflowBuilder, WorkflowContext, handler
from agent_framework.openai import OpenAIChatCompletionClient

import tether
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text
from tether.types import RolloutStatus

client = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")
titler = Agent(client=client, name="titler", instructions="Give the summary a title.")


class Summarizer(Executor):
    """Summarizes the text with one direct chat-client call and passes the summary on."""

    @handler
    async def summarize(self, text: str, ctx: WorkflowContext[str]) -> None:
        response = await client.get_response([Message(role="user", contents=[f"Summarize: {text}"])])
        await ctx.send_message(response.text)


class Titler(Executor):
    """Runs the titler agent on the summary and yields its answer."""

    @handler
    async def title(self, summary: str, ctx: WorkflowContext[Never, str]) -> None:
        result = await titler.run(summary)
        await ctx.yield_output(result.text)


summarizer = Summarizer(id="summarizer")
titling = Titler(id="titling")
workflow = WorkflowBuilder(start_executor=summarizer).add_edge(summarizer, titling).build()


def _model(request: dict[str, Any]) -> Reply:
    last = str(request["messages"][-1]["content"])
    return text(f"summary of {last}" if last.startswith("Summarize:") else f"Title: {last}")


async def test_an_executor_calling_a_client_is_named_by_its_id() -> None:
    wrapped = tether.wrap(workflow, reward=lambda task, out: 1.0, optimize=["summarizer"])
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await tether.Trainer(model=backend).adev(wrapped, ["rivers of Europe", "lakes of Africa"])
        finally:
            await backend.close()
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert [t.agent_name for t in rollout.transitions] == ["summarizer", "titler"]
        assert [t.trainable for t in rollout.transitions] == [True, False]
        assert rollout.output["text"] == f"Title: summary of Summarize: {rollout.rollout.input}"
    assert not report.all_problems, report.all_problems
