"""The proxy routes each call to its sub-agent's policy (``ChatRequest.policy``) and records it on the span;
the policy survives the hop to a backend served over HTTP (the Ray runners' path); the Session refuses a
per-policy map on a backend that cannot hold policies, naming the ones that can."""

from __future__ import annotations

import openai
import pytest

import tether
from tether import spans
from tether.capture.context import AGENT_HEADER
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import ChatRequest, ChatResult, Choice, ModelBackend
from tether.models.http_backend import BackendServer, HttpBackend
from tether.policies import PolicyMap
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.training.engine.session import Session
from tether.types import Span


class PolicyEcho(ModelBackend):
    """A model that answers with the policy it was asked for (what a backend holding policies routes on)."""

    name = "echo"

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def chat(self, request: ChatRequest) -> ChatResult:
        self.seen.append(request.policy)
        return ChatResult([Choice({"role": "assistant", "content": str(request.policy)}, "stop")], "echo")


async def _ask(
    backend: ModelBackend, policies: PolicyMap | None, agents: list[str]
) -> tuple[list[str], list[Span]]:
    store = MemoryStore()
    await store.enqueue([tether.types.RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w")
    answers = []
    async with SpanBatcher(store) as batcher:
        async with (
            ProxyServer(backend, batcher=batcher, policies=policies) as proxy,
            proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
        ):
            for agent in agents:
                client = openai.AsyncOpenAI(base_url=url, api_key="k", default_headers={AGENT_HEADER: agent})
                reply = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
                await client.close()
                answers.append(reply.choices[0].message.content or "")
            await proxy.flush()
    return answers, await store.get_spans(attempt.attempt_id)


async def test_each_call_goes_to_its_sub_agents_policy_and_the_span_records_it() -> None:
    backend = PolicyEcho()
    split = PolicyMap.from_optimize({"w": ["writer"], "c": ["checker"]})
    answers, recorded = await _ask(backend, split, ["writer", "checker", "helper"])
    assert answers == ["w", "c", "frozen"] and backend.seen == ["w", "c", "frozen"]
    assert [s.attributes[spans.POLICY] for s in recorded] == ["w", "c", "frozen"]
    # a shared map leaves the backend's default policy to answer; spans still say which policy served
    shared = PolicyEcho()
    answers, recorded = await _ask(shared, PolicyMap.from_optimize(["writer"]), ["writer", "helper"])
    assert shared.seen == [None, None] and [s.attributes[spans.POLICY] for s in recorded] == ["policy"] * 2
    # no map: today's behaviour, nothing recorded
    plain = PolicyEcho()
    _, recorded = await _ask(plain, None, ["writer"])
    assert plain.seen == [None] and spans.POLICY not in recorded[0].attributes


async def test_the_policy_survives_the_hop_to_a_backend_served_over_http() -> None:
    backend = PolicyEcho()
    split = PolicyMap.from_optimize({"w": ["writer"]})
    async with BackendServer(backend) as served:
        remote = HttpBackend(served.url)
        try:
            answers, _ = await _ask(remote, split, ["writer", "helper"])
        finally:
            await remote.close()
    assert answers == ["w", "frozen"] and backend.seen == ["w", "frozen"]


async def test_a_session_refuses_policies_on_a_backend_that_cannot_hold_them() -> None:
    agent = tether.wrap(lambda task: task, optimize={"w": ["writer"]})
    with pytest.raises(ValueError, match=r"PolicyEcho cannot hold.*'embedded', 'hf:<path>' or 'vllm:<model>'"):
        async with Session(agent, PolicyEcho()):
            pass
    # a shared map needs nothing of the backend
    async with Session(tether.wrap(lambda task: task, optimize=["writer"]), PolicyEcho()) as session:
        assert session.proxy.policies is not None and session.proxy.policies.shared
