"""OpenTelemetry GenAI spans out: a ``Trainer.dev`` run of a plain-openai agent against the fake LLM, exported
over OTLP/HTTP to a real receiver on loopback, arrives as one trace per rollout with the attempt as its root
span and the conventions' attribute names; nothing is sent unless asked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from typing import Any

import otel_calc_agent
import pytest
from receiver import messages, otlp_receiver

import tether
from tether.otel.export import OTLPExport
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call

# The GenAI semantic conventions' attribute names this export uses (the gen_ai.* registry, checked against
# the OpenTelemetry semantic-conventions docs: agent spans, inference spans, execute_tool spans).
REGISTRY = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.agent.name",
    "gen_ai.conversation.id",
    "gen_ai.request.model",
    "gen_ai.request.temperature",
    "gen_ai.request.top_p",
    "gen_ai.request.max_tokens",
    "gen_ai.request.seed",
    "gen_ai.request.stop_sequences",
    "gen_ai.request.choice.count",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.definitions",
    "gen_ai.tool.name",
    "gen_ai.tool.type",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
OPERATIONS = {"chat", "execute_tool", "invoke_agent"}


def _calculator_model(request: dict[str, Any]) -> Reply:
    tool_results = [m for m in request["messages"] if m["role"] == "tool"]
    if tool_results:
        return text(tool_results[-1]["content"])
    return tool_call("calculator", {"expression": request["messages"][-1]["content"]})


def _reward(task: str, output: str) -> float:
    left, _, right = task.split()
    return float(output == str(int(left) + int(right)))


TASKS = ["2 + 3", "40 + 2"]


def _dev(export: OTLPExport | None = None) -> tether.training.run.dev_report.DevReport:
    agent = tether.wrap(otel_calc_agent.solve, reward=_reward)
    with FakeLLM(handler=_calculator_model) as llm:
        report = tether.Trainer(model=llm.base_url, progress=False, export=export).dev(agent, TASKS)
    assert [r.reward for r in report] == [1.0, 1.0], [r.error for r in report]
    return report


def test_a_dev_run_arrives_as_genai_spans_one_trace_per_rollout() -> None:
    with otlp_receiver() as received:
        report = _dev(OTLPExport(endpoint=received.url, service_name="calc-agent"))
    assert received.content_types and set(received.content_types) == {"application/x-protobuf"}
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in received.spans:
        traces[span["trace_id"]].append(span)
    assert len(traces) == len(TASKS)  # one trace per rollout
    by_rollout = {}
    for spans in traces.values():
        (root,) = [s for s in spans if not s["parent_span_id"]]  # the attempt
        by_rollout[root["attributes"]["tether.rollout.id"]] = (root, spans)
        assert all(s["parent_span_id"] == root["span_id"] for s in spans if s is not root)
        assert all(s["resource"]["service.name"] == "calc-agent" and s["scope"] == "tether" for s in spans)
        for span in spans:
            names = {k for k in span["attributes"] if k.startswith("gen_ai.")}
            assert names <= REGISTRY, names - REGISTRY
            assert span["attributes"].get("gen_ai.operation.name", "tether") in OPERATIONS | {"tether"}
            assert span["start"] <= span["end"]
    assert set(by_rollout) == {r.rollout.rollout_id for r in report}

    rollout = report.rollouts[0]
    root, spans = by_rollout[rollout.rollout.rollout_id]
    attrs = root["attributes"]
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["gen_ai.agent.name"] == "solve"
    assert root["name"] == "invoke_agent solve"
    assert attrs["gen_ai.conversation.id"] == rollout.rollout.rollout_id
    assert attrs["tether.reward"] == 1.0 and attrs["tether.attempt.status"] == "succeeded"

    chats = sorted((s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"), key=_start)
    proxy_calls = [s for s in chats if "gen_ai.response.id" in s["attributes"]]
    assert len(proxy_calls) == 2  # the tool call, then the answer after the tool's result
    first, second = (s["attributes"] for s in proxy_calls)
    assert first["gen_ai.request.model"] == "gpt-test" and proxy_calls[0]["name"] == "chat gpt-test"
    assert proxy_calls[0]["kind"] == 3  # SPAN_KIND_CLIENT
    assert first["gen_ai.agent.name"] == "solve"
    assert isinstance(first["gen_ai.usage.input_tokens"], int) and first["gen_ai.usage.input_tokens"] > 0
    assert isinstance(first["gen_ai.usage.output_tokens"], int) and first["gen_ai.usage.output_tokens"] > 0
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert messages(proxy_calls[0], "gen_ai.input.messages") == [
        {"role": "system", "parts": [{"type": "text", "content": otel_calc_agent.SYSTEM}]},
        {"role": "user", "parts": [{"type": "text", "content": "2 + 3"}]},
    ]
    (output,) = messages(proxy_calls[0], "gen_ai.output.messages")
    (call,) = output["parts"]
    assert output["role"] == "assistant" and output["finish_reason"] == "tool_calls"
    assert call["type"] == "tool_call" and call["name"] == "calculator"
    assert call["arguments"] == {"expression": "2 + 3"}
    assert json.loads(first["gen_ai.tool.definitions"])[0]["function"]["name"] == "calculator"
    tool_message = messages(proxy_calls[1], "gen_ai.input.messages")[-1]
    assert tool_message == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call["id"], "response": "5"}],
    }
    assert messages(proxy_calls[1], "gen_ai.output.messages")[0]["parts"] == [{"type": "text", "content": "5"}]
    assert second["gen_ai.response.finish_reasons"] == ["stop"]

    (tool,) = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert tool["name"] == "execute_tool calculator"
    assert tool["attributes"]["gen_ai.tool.name"] == "calculator"
    assert tool["attributes"]["gen_ai.tool.call.id"] == call["id"]
    assert tool["attributes"]["gen_ai.tool.call.result"] == "5"
    assert tool["attributes"]["gen_ai.agent.name"] == "solve"


def _start(span: dict[str, Any]) -> int:
    return int(span["start"])


def test_content_false_leaves_messages_and_tool_payloads_out() -> None:
    with otlp_receiver() as received:
        _dev(OTLPExport(endpoint=received.url + "/v1/traces", content=False))
    assert received.spans
    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.result"}
    assert not any(content_keys & set(s["attributes"]) for s in received.spans)
    assert any("gen_ai.usage.input_tokens" in s["attributes"] for s in received.spans)


def test_nothing_is_sent_by_default_and_the_standard_variables_turn_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with otlp_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.url)  # an endpoint alone does not export
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        _dev()
        assert received.spans == []
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
        _dev()
        assert received.spans and {s["resource"]["service.name"] for s in received.spans} == {"from-env"}
        received.spans.clear()
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        _dev()
        assert received.spans == []


def test_a_grpc_protocol_is_refused_with_the_fix() -> None:
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"):
        OTLPExport.from_env(env)


def test_import_tether_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, tether; tether.OTLPExport(); print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    code = code.replace("; ", "\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
