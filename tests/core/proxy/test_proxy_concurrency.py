"""200 concurrent calls across 20 rollout attempts: each span lands on its own attempt, in order, none lost."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import openai

from tether.capture.context import AGENT_HEADER, CALL_ID_HEADER
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text
from tether.types import RolloutSpec

ROLLOUTS = 20
CALLS = 10


def _echo(request: dict[str, Any]) -> Any:
    # a random small delay so calls of different attempts interleave and finish out of submission order
    return text(f"re:{request['messages'][-1]['content']}", delay_s=random.uniform(0, 0.01))


async def test_200_concurrent_calls_are_attributed_in_order() -> None:
    store = MemoryStore()
    await store.enqueue([RolloutSpec(input=i) for i in range(ROLLOUTS)])
    claimed = await store.dequeue("worker", limit=ROLLOUTS)
    assert len(claimed) == ROLLOUTS

    async with FakeLLM(handler=_echo) as llm:
        batcher = SpanBatcher(store, max_batch=16, max_delay_s=0.005)
        async with ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy:

            async def agent(k: int) -> list[str]:
                rollout, attempt = claimed[k]
                async with proxy.attempt(rollout.rollout_id, attempt.attempt_id) as url:
                    client = openai.AsyncOpenAI(
                        base_url=url, api_key="k", default_headers={AGENT_HEADER: f"agent-{k % 3}"}
                    )
                    history: list[Any] = []
                    answers = []
                    for step in range(CALLS):
                        history.append({"role": "user", "content": f"{k}/{step}"})
                        out = await client.chat.completions.create(
                            model="m",
                            messages=history,
                            extra_headers={CALL_ID_HEADER: f"c-{k}-{step}"},
                        )
                        answers.append(out.choices[0].message.content or "")
                        history.append({"role": "assistant", "content": answers[-1]})
                    await client.close()
                return answers

            results = await asyncio.gather(*(agent(k) for k in range(ROLLOUTS)))
            assert batcher.pending + batcher.written == ROLLOUTS * CALLS
        await batcher.close()
    assert batcher.written == ROLLOUTS * CALLS and batcher.dropped == 0
    assert len(llm.requests) == ROLLOUTS * CALLS

    for k, (rollout, attempt) in enumerate(claimed):
        assert results[k] == [f"re:{k}/{step}" for step in range(CALLS)]
        spans = await store.get_spans(attempt.attempt_id)
        assert len(spans) == CALLS
        assert [s.sequence for s in spans] == list(range(CALLS))
        for step, span in enumerate(spans):
            assert span.rollout_id == rollout.rollout_id
            assert span.agent_name == f"agent-{k % 3}"
            assert span.attributes["call_id"] == f"c-{k}-{step}"
            assert span.attributes["request"]["messages"][-1]["content"] == f"{k}/{step}"
            assert len(span.attributes["request"]["messages"]) == 2 * step + 1
            assert span.attributes["choices"][0]["message"]["content"] == f"re:{k}/{step}"
            assert span.attributes["token_ids_available"] is False  # not asked for token ids
