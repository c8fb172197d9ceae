"""Traces in: OTLP/HTTP (protobuf, JSON) posted to the store server's ``/v1/traces`` and OTLP JSON files read by
``tether import`` become imported rollouts with LLM calls (messages), tool calls and agent names.

The producers are real: tether's own GenAI export of a ``Trainer.dev`` run, and a plain function using the
``openai`` client instrumented by OpenInference's instrumentation, both exporting with the OpenTelemetry SDK's
OTLP/HTTP exporter to a store server on loopback; the model is the fake LLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import otel_calc_agent
from click.testing import CliRunner
from test_export import TASKS, _calculator_model, _reward

import tether
from tether import spans
from tether.cli import main
from tether.otel.export import OTLPExport
from tether.server import start_server
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM
from tether.training.signal.transitions import build_transitions
from tether.types import Mode, RolloutSpec, RolloutStatus, Span, SpanKind


async def _imported(store: tether.Store) -> list[tuple[tether.Rollout, list[Span]]]:
    out = []
    for rollout in await store.list_rollouts():
        (attempt,) = await store.get_attempts(rollout.rollout_id)
        out.append((rollout, await store.get_spans(attempt.attempt_id)))
    return out


async def test_a_dev_run_exported_to_the_store_server_comes_back_as_the_same_calls() -> None:
    store = open_store("memory:")
    agent = tether.wrap(otel_calc_agent.solve, reward=_reward)
    async with await start_server(store) as server, FakeLLM(handler=_calculator_model) as llm:
        trainer = tether.Trainer(model=llm.base_url, progress=False, export=OTLPExport(endpoint=server.url))
        report = await trainer.adev(agent, TASKS)
        imported = await _imported(store)
    assert len(imported) == len(TASKS)
    originals = {r.rollout.rollout_id: r for r in report.rollouts}
    for rollout, got in imported:
        meta = rollout.metadata[spans.IMPORTED]
        assert rollout.status == RolloutStatus.SUCCEEDED and meta["conventions"] == ["gen_ai"]
        assert meta["source"] == "otlp" and meta["service"] == "tether"
        llm_spans = [s for s in got if s.kind == SpanKind.LLM]
        original = next(o for o in originals.values() if o.rollout.input == rollout.input)
        proxy = [s for s in original.spans if s.kind == SpanKind.LLM and s.name == spans.LLM_CALL]
        # the proxy's calls (and the adapter's own views of them) came back with their messages and answers
        want = [s.attributes["request"]["messages"] for s in proxy]
        assert all(m in [s.attributes["request"]["messages"] for s in llm_spans] for m in want)
        call = next(s for s in llm_spans if s.attributes["request"]["messages"] == want[0])
        assert call.agent_name == "solve" and call.attributes[spans.IMPORTED] is True
        assert call.attributes["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
        assert call.attributes["usage"]["prompt_tokens"] == proxy[0].attributes["usage"]["prompt_tokens"]
        assert call.attributes["token_ids_available"] is False and call.attributes["prompt_token_ids"] is None
        (tool,) = [s for s in got if s.kind == SpanKind.TOOL]
        assert tool.name == "calculator" and tool.agent_name == "solve"
        assert tool.attributes[spans.TOOL_ARGUMENTS] == {"expression": rollout.input}
        assert tool.attributes[spans.TOOL_RESULT] == rollout.output
        # transitions are built from them: the messages and answers, with no token ids (a trainer tokenizes)
        built = build_transitions(rollout, got)
        assert [t.messages for t in built.transitions] == want
        assert all(t.prompt_token_ids == [] and t.agent_name == "solve" for t in built.transitions)


async def test_openinference_instrumented_openai_calls_become_rollouts() -> None:
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    store = open_store("memory:")
    async with await start_server(store) as server, FakeLLM(handler=_calculator_model) as llm:
        provider = TracerProvider(resource=Resource.create({"service.name": "calc-prod"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server.url + "/v1/traces")))
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            tracer = provider.get_tracer("calc-prod")
            client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
            for question in TASKS:
                await _production_agent(client, tracer, question)
            await client.close()
        finally:
            instrumentor.uninstrument()
        import asyncio

        await asyncio.to_thread(provider.shutdown)  # the exporter posts from its thread to our loop
        imported = await _imported(store)
    assert sorted(r.input for r, _ in imported) == sorted(TASKS)
    for rollout, got in imported:
        assert rollout.metadata[spans.IMPORTED]["conventions"] == ["openinference"]
        assert rollout.metadata[spans.IMPORTED]["service"] == "calc-prod"
        assert rollout.output == str(_reward_answer(rollout.input))
        first, second = [s for s in got if s.kind == SpanKind.LLM]
        assert {first.agent_name, second.agent_name} == {"calculator_agent"}
        assert first.attributes["request"]["messages"] == [
            {"role": "system", "content": otel_calc_agent.SYSTEM},
            {"role": "user", "content": rollout.input},
        ]
        (asked,) = first.attributes["choices"][0]["message"]["tool_calls"]
        assert asked["function"]["name"] == "calculator"
        assert json.loads(asked["function"]["arguments"]) == {"expression": rollout.input}
        assert first.attributes["request"]["tools"][0]["function"]["name"] == "calculator"
        assert second.attributes["request"]["messages"][-1]["role"] == "tool"
        assert second.attributes["choices"][0]["message"]["content"] == rollout.output
        (tool,) = [s for s in got if s.kind == SpanKind.TOOL]
        assert tool.name == "calculator" and tool.attributes[spans.TOOL_RESULT] == rollout.output


def _reward_answer(question: str) -> int:
    left, _, right = question.split()
    return int(left) + int(right)


async def _production_agent(client: openai.AsyncOpenAI, tracer: Any, question: str) -> str:
    """A plain function as it runs in production: an agent span (OpenInference's AGENT kind), the openai calls
    (traced by the instrumentation) and a hand-traced TOOL span."""
    with tracer.start_as_current_span(
        "calculator_agent", attributes={"openinference.span.kind": "AGENT", "input.value": question}
    ) as agent_span:
        messages: list[Any] = [
            {"role": "system", "content": otel_calc_agent.SYSTEM},
            {"role": "user", "content": question},
        ]
        for _ in range(3):
            reply = await client.chat.completions.create(
                model="gpt-prod", messages=messages, tools=otel_calc_agent.TOOLS
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                agent_span.set_attribute("output.value", message.content or "")
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                with tracer.start_as_current_span(
                    "calculator",
                    attributes={
                        "openinference.span.kind": "TOOL",
                        "tool.name": "calculator",
                        "input.value": call.function.arguments,  # type: ignore[union-attr]
                    },
                ) as tool_span:
                    result = otel_calc_agent.calculator(**json.loads(call.function.arguments))  # type: ignore[union-attr]
                    tool_span.set_attribute("output.value", result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return "gave up"


def _genai_file_payload() -> dict[str, Any]:
    """An OTLP/JSON export as a GenAI-instrumented app writes it: an agent, a chat call, a failed tool call."""

    def attrs(**values: Any) -> list[dict[str, Any]]:
        out = []
        for key, value in values.items():
            kind = "intValue" if isinstance(value, int) else "stringValue"
            out.append(
                {"key": key.replace("__", "."), "value": {kind: str(value) if kind == "intValue" else value}}
            )
        return out

    trace = "5b8efff798038103d269b633813fc60c"
    messages = [{"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]}]
    output = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}}],
            "finish_reason": "tool_call",
        }
    ]
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs(service__name="weather-app")},
                "scopeSpans": [
                    {
                        "scope": {"name": "app"},
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "chat gpt-4o",
                                "startTimeUnixNano": "1700000000100000000",
                                "endTimeUnixNano": "1700000000300000000",
                                "attributes": attrs(
                                    gen_ai__operation__name="chat",
                                    gen_ai__request__model="gpt-4o",
                                    gen_ai__usage__input_tokens=12,
                                    gen_ai__usage__output_tokens=7,
                                    gen_ai__input__messages=json.dumps(messages),
                                    gen_ai__output__messages=json.dumps(output),
                                ),
                            },
                            {
                                "traceId": trace,
                                "spanId": "eee19b7ec3c1b175",
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "execute_tool weather",
                                "startTimeUnixNano": "1700000000400000000",
                                "endTimeUnixNano": "1700000000500000000",
                                "status": {"code": 2, "message": "service unavailable"},
                                "attributes": attrs(
                                    gen_ai__operation__name="execute_tool",
                                    gen_ai__tool__name="weather",
                                    gen_ai__tool__call__id="c1",
                                    gen_ai__tool__call__arguments='{"city": "Paris"}',
                                ),
                            },
                            {
                                "traceId": trace,
                                "spanId": "eee19b7ec3c1b173",
                                "name": "invoke_agent forecaster",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000600000000",
                                "attributes": attrs(
                                    gen_ai__operation__name="invoke_agent", gen_ai__agent__name="forecaster"
                                ),
                            },
                        ],
                    }
                ],
            }
        ]
    }


def _check_weather(imported: list[tuple[tether.Rollout, list[Span]]]) -> None:
    ((rollout, got),) = imported
    assert rollout.input == "weather in Paris?" and rollout.metadata[spans.IMPORTED]["service"] == "weather-app"
    llm, tool = got
    assert llm.kind == SpanKind.LLM and llm.agent_name == "forecaster"
    assert llm.attributes["request"]["params"]["model"] == "gpt-4o"
    assert llm.attributes["usage"] == {"prompt_tokens": 12, "completion_tokens": 7}
    assert llm.attributes["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "weather",
        "arguments": '{"city":"Paris"}',
    }
    assert tool.kind == SpanKind.TOOL and tool.agent_name == "forecaster"
    assert tool.attributes[spans.TOOL_ERROR] == "service unavailable"
    assert tool.attributes[spans.TOOL_ARGUMENTS] == {"city": "Paris"}
    assert abs(llm.start_time - 1700000000.1) < 1e-3


def test_tether_import_reads_an_otlp_json_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(_genai_file_payload()))
    db = tmp_path / "x.db"
    result = CliRunner().invoke(main, ["import", str(path), "--store", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert "imported 1 rollout(s)" in result.output

    async def read() -> list[tuple[tether.Rollout, list[Span]]]:
        store = open_store(f"sqlite:///{db}")
        try:
            return await _imported(store)
        finally:
            await store.close()

    import asyncio

    _check_weather(asyncio.run(read()))
    bad = tmp_path / "bad.json"
    bad.write_text('{"spans": []}')
    result = CliRunner().invoke(main, ["import", str(bad), "--store", f"sqlite:///{db}"])
    assert result.exit_code != 0 and "resourceSpans" in result.output


async def test_the_store_server_takes_otlp_json_and_refuses_other_bodies() -> None:
    store = open_store("memory:")
    async with await start_server(store) as server, aiohttp.ClientSession() as http:
        async with http.post(server.url + "/v1/traces", json=_genai_file_payload()) as response:
            assert response.status == 200 and await response.json() == {}
        async with http.post(server.url + "/v1/traces", data=b"x", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415 and "application/x-protobuf" in (await r.json())["error"]["message"]
        _check_weather(await _imported(store))


async def test_import_while_a_run_dequeues_never_touches_its_rollouts() -> None:
    """Issue 26 item 1: imports used the queue (enqueue, dequeue as ``tether-import``), so a runner claimed
    imported traces and the importer claimed training rollouts; with queued rollouts they were refused."""
    from tether.otel.ingest import convert, import_traces
    from tether.otel.otlp import parse_json

    store = open_store("memory:")
    waiting = await store.enqueue([RolloutSpec(input=f"task {i}", mode=Mode.TRAIN) for i in range(3)])
    outcome = await import_traces(store, convert(parse_json(json.dumps(_genai_file_payload()))))
    (rollout_id,) = outcome.rollout_ids
    assert (await store.get_rollout(rollout_id)).status.finished
    claimed = await store.dequeue("runner", limit=10)
    assert [r.rollout_id for r, _ in claimed] == [r.rollout_id for r in waiting]
    for rollout, attempt in claimed:
        assert attempt.worker_id == "runner" and rollout.status == RolloutStatus.RUNNING
