"""Production traces in → training data → a fine-tuned model: a plain function using the ``openai`` client,
instrumented by OpenInference's real instrumentation, answers questions through the fake LLM (a fixed good
reply) and exports its spans over OTLP/HTTP to a tether store server; ``tether.SFT`` then trains the embedded
model on those imported calls (tokenized with its chat template) and the model's probability of the good
reply rises, on the imported prompts and on a question it never saw."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

import tether
from tether.server import start_server
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, text

torch = pytest.importorskip("torch")

from tether.models.base import ChatRequest  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402

SYSTEM = "Answer in the format ANSWER: <number>."
GOOD = "ANSWER: 42"
QUESTIONS = [f"What is {a} plus {b}?" for a, b in [(40, 2), (30, 12), (21, 21), (2, 40), (35, 7), (41, 1)]]
UNSEEN = "What is 6 times 7?"


async def _support_agent(client: openai.AsyncOpenAI, tracer: Any, question: str) -> str:
    """The production code: one chat call inside an agent span (OpenInference's AGENT kind)."""
    with tracer.start_as_current_span("support_agent", attributes={"openinference.span.kind": "AGENT"}):
        reply = await client.chat.completions.create(
            model="gpt-prod",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
        return reply.choices[0].message.content or ""


async def _export_production_traces(server_url: str) -> None:
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "support-prod"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server_url + "/v1/traces")))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        async with FakeLLM(handler=lambda request: text(GOOD)) as llm:
            client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
            answers = [await _support_agent(client, provider.get_tracer("prod"), q) for q in QUESTIONS]
            await client.close()
    finally:
        instrumentor.uninstrument()
    assert answers == [GOOD] * len(QUESTIONS)
    await asyncio.to_thread(provider.shutdown)  # the exporter posts from its thread to our loop


def _good_reply_logprob(backend: EmbeddedBackend, question: str) -> float:
    """Mean log-probability per token of GOOD (and its end marker) after the question's prompt."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    prompt = backend.render(messages, None)
    reply = backend.render_reply(messages, None, {"role": "assistant", "content": GOOD})
    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(reply)[:, None])
    return float(logprobs.mean())


async def test_sft_on_imported_openinference_traces_raises_the_good_replys_probability(tmp_path: Path) -> None:
    backend = EmbeddedBackend(preset="nano", seed=0)
    before = {q: _good_reply_logprob(backend, q) for q in [*QUESTIONS, UNSEEN]}
    store = open_store("memory:")
    async with await start_server(store) as server:
        await _export_production_traces(server.url)
        assert len(await store.list_rollouts()) == len(QUESTIONS)
        sft = tether.SFT(source=server.url, agents=["support_agent"], epochs=15, lr=3e-3, batch_size=6)
        trainer = tether.Trainer(model=backend, algorithm=sft, run_root=str(tmp_path), name="sft", progress=False)
        result = await trainer.afit(tether.wrap(lambda task: task), train=[])
        # an agent the traces do not have: a clear error naming the ones they have
        wrong = tether.Trainer(
            model=backend, algorithm=tether.SFT(source=server.url, agents=["support"]), run_root=str(tmp_path)
        )
        with pytest.raises(ValueError, match=r"unknown sub-agent 'support'.*support_agent"):
            await wrong.afit(tether.wrap(lambda task: task), train=[])
    after = {q: _good_reply_logprob(backend, q) for q in [*QUESTIONS, UNSEEN]}

    # the imported calls had no token ids: the model's chat template tokenized every one, and the run says so
    data = result.history[0]
    assert data["kind"] == "sft_data" and data["tokenizer"] == "embedded"
    assert data["examples"] == data["imported"] == data["retokenized"] == len(QUESTIONS)
    steps = [h for h in result.history if h["kind"] == "sft"]
    assert len(steps) == 15 and steps[-1]["loss"] < steps[0]["loss"] / 2
    logged = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in logged] == ["sft_data"] + ["sft"] * 15
    assert result.checkpoint is not None and (result.checkpoint / "model.safetensors").exists()
    # the good reply became far more likely, on the trained prompts and on an unseen question
    for q in QUESTIONS:
        assert after[q] > before[q] + 1.0, (q, before[q], after[q])
    assert after[UNSEEN] > before[UNSEEN] + 1.0, (before[UNSEEN], after[UNSEEN])
    # and the model now answers in the demonstrated format
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": UNSEEN}]
    reply = await backend.chat(ChatRequest(messages=messages, temperature=0.0, max_tokens=16))
    await backend.close()
    assert reply.choices[0].message["content"] == GOOD
