"""Issue 26 items 1, 2 and 9 on ``POST /v1/traces``: what the receiver answers is what it stored, once.

Real store server on loopback, real SQLite; payloads are OTLP/JSON built here and OTLP/protobuf built with
opentelemetry-proto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tether.server import start_server
from tether.store import open_store
from tether.store.base import Store
from tether.types import RolloutStatus


def _attrs(**kw: Any) -> list[dict[str, Any]]:
    out = []
    for key, value in kw.items():
        v = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": str(value)}
        out.append({"key": key.replace("__", "."), "value": v})
    return out


def llm_span(trace: str, span_id: str, parent: str | None, text: str, **extra: Any) -> dict[str, Any]:
    span = {
        "traceId": trace,
        "spanId": span_id,
        "name": "chat m",
        "startTimeUnixNano": "1700000000100000000",
        "endTimeUnixNano": "1700000000200000000",
        "attributes": _attrs(
            gen_ai__operation__name="chat",
            gen_ai__input__messages=json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}]),
            gen_ai__output__messages=json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "ok " + text}]}]
            ),
        ),
    }
    if parent:
        span["parentSpanId"] = parent
    span.update(extra)
    return span


def root_span(trace: str, span_id: str) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span_id,
        "name": "invoke_agent a",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000900000000",
        "attributes": _attrs(gen_ai__operation__name="invoke_agent", gen_ai__agent__name="a"),
    }


def payload(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]}


T1, T2 = "0af7651916cd43dd8448eb211c80319c", "1bf7651916cd43dd8448eb211c80319d"


async def _contents(store: Store) -> dict[str, list[str]]:
    """rollout id -> the ids of its spans, for every rollout in the store."""
    out = {}
    for rollout in await store.list_rollouts():
        (attempt,) = await store.get_attempts(rollout.rollout_id)
        out[rollout.rollout_id] = [s.span_id for s in await store.get_spans(attempt.attempt_id)]
    return out


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    async with await start_server(store) as server, aiohttp.ClientSession() as http:
        yield store, server.url + "/v1/traces", http
    await store.close()


async def test_a_retried_request_and_a_trace_in_parts_make_one_rollout_each_span_once(served: Any) -> None:
    store, url, http = served
    children = payload(llm_span(T1, "00000000000000a1", "00000000000000a0", "q1"))
    for _ in range(2):  # the exporter's retry of a request whose answer it lost
        async with http.post(url, json=children) as r:
            assert r.status == 200 and await r.json() == {}
    # answered means stored: the children are in the store before their root arrives
    assert list((await _contents(store)).values()) == [["00000000000000a1"]]
    rest = payload(root_span(T1, "00000000000000a0"), llm_span(T1, "00000000000000a2", "00000000000000a0", "q2"))
    for _ in range(2):
        async with http.post(url, json=rest) as r:
            assert r.status == 200
    contents = await _contents(store)
    assert list(contents.values()) == [["00000000000000a1", "00000000000000a2"]]
    (rollout,) = await store.list_rollouts()
    assert rollout.status == RolloutStatus.SUCCEEDED and rollout.input == "q1"


async def test_one_bad_trace_is_rejected_the_good_ones_of_the_request_are_written(served: Any) -> None:
    store, url, http = served
    bad_tool = {  # a tool span with no name at all: the store refuses the span (InvalidInput)
        "traceId": T2,
        "spanId": "00000000000000b1",
        "name": "",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": _attrs(gen_ai__operation__name="execute_tool"),
    }
    body = payload(
        llm_span(T1, "00000000000000a1", None, "good"), bad_tool, llm_span(T2, "00000000000000b2", None, "x")
    )
    async with http.post(url, json=body) as r:
        assert r.status == 200
        answer = await r.json()
    assert answer["partialSuccess"]["rejectedSpans"] == 2 and T2 in answer["partialSuccess"]["errorMessage"]
    assert list((await _contents(store)).values()) == [["00000000000000a1"]]  # and nothing of T2, not half


async def test_protobuf_partial_success_is_a_protobuf_answer(served: Any) -> None:
    pytest.importorskip("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    store, url, http = served
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for trace, name in ((T1, "lookup"), (T2, "")):
        s = spans.add(trace_id=bytes.fromhex(trace), span_id=bytes.fromhex(trace[:16]), name=name)
        s.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="execute_tool")))
        s.attributes.append(KeyValue(key="ratio", value=AnyValue(double_value=float("inf"))))
    headers = {"Content-Type": "application/x-protobuf"}
    async with http.post(url, data=request.SerializeToString(), headers=headers) as r:
        assert r.status == 200
        answer = ExportTraceServiceResponse.FromString(await r.read())
    assert answer.partial_success.rejected_spans == 1 and T2 in answer.partial_success.error_message
    ((_, span_ids),) = (await _contents(store)).items()
    assert span_ids == [T1[:16]]


_GOOD = llm_span(T1, "00000000000000a1", None, "q")


def _with(**changes: Any) -> dict[str, Any]:
    return payload({**_GOOD, **changes})


MALFORMED: dict[str, bytes] = {
    "non-UTF-8": b'{"resourceSpans": [\xff\xfe]}',
    "resourceSpans [1]": b'{"resourceSpans": [1]}',
    "resourceSpans object": b'{"resourceSpans": {"a": 1}}',
    'scopeSpans "x"': b'{"resourceSpans": [{"scopeSpans": "x"}]}',
    "spans [1]": b'{"resourceSpans": [{"scopeSpans": [{"spans": [1]}]}]}',
    "start abc": json.dumps(_with(startTimeUnixNano="abc")).encode(),
    "start 1e400": json.dumps(_with(startTimeUnixNano="__N__")).replace('"__N__"', "1e400").encode(),
    "start negative": json.dumps(_with(startTimeUnixNano="-5")).encode(),
    "spanId zz": json.dumps(_with(spanId="zz")).encode(),
    "traceId short": json.dumps(_with(traceId="abcd")).encode(),
    "bad base64": json.dumps(_with(spanId="!!!notbase64!!")).encode(),
    "no ids": json.dumps(_with(spanId="")).encode(),
    "attribute without key": json.dumps(_with(attributes=[{"value": {"stringValue": "x"}}])).encode(),
    "intValue abc": json.dumps(_with(attributes=[{"key": "n", "value": {"intValue": "abc"}}])).encode(),
    "attributes string": json.dumps(_with(attributes="x")).encode(),
    "status string": json.dumps(_with(status="x")).encode(),
    "arrayValue string": json.dumps(_with(attributes=[{"key": "a", "value": {"arrayValue": "x"}}])).encode(),
    "nested too deep": (
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"'
        + T1.encode()
        + b'","spanId":"00000000000000a1",'
        b'"attributes":[{"key":"a","value":' + b'{"arrayValue":{"values":[' * 400 + b"]}}" * 400 + b"}]}]}]}]}"
    ),
    "not an export": b'{"spans": []}',
    "garbage": b"\x00\x01garbage",
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_malformed_otlp_json_is_a_400_naming_the_problem(served: Any, name: str) -> None:
    store, url, http = served
    async with http.post(url, data=MALFORMED[name], headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400, await r.text()
        message = (await r.json())["error"]["message"]
    assert message and "\n" not in message
    assert await store.list_rollouts() == []


@pytest.mark.parametrize("body", [b"\x0a\x05\x12\x03\x0a\x01", b"inf inf nan", b"\xff" * 64])
async def test_malformed_protobuf_is_a_400(served: Any, body: bytes) -> None:
    pytest.importorskip("opentelemetry.proto")
    store, url, http = served
    async with http.post(url, data=body, headers={"Content-Type": "application/x-protobuf"}) as r:
        assert r.status == 400, await r.text()
    assert await store.list_rollouts() == []


async def test_a_store_that_fails_answers_503_so_the_exporter_retries(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    async with await start_server(store) as server, aiohttp.ClientSession() as http:
        await store.close()  # every write now fails with StoreError
        async with http.post(server.url + "/v1/traces", json=payload(_GOOD)) as r:
            assert r.status == 503 and "retry" in (await r.json())["error"]["message"]


async def test_a_large_body_is_parsed_in_a_worker_process_with_the_same_result(served: Any) -> None:
    """Issue 26 item 8: a body over ``PROCESS_MIN_BYTES`` goes through the worker process in pieces; a trace
    longer than a piece is written whole, and a bad trace is rejected whole, not cut after its first piece."""
    from tether.otel import _parse_pool
    from tether.otel.ingest import CHUNK_SPANS

    store, url, http = served
    n = 2 * CHUNK_SPANS + 7
    filler = "x" * 2000  # enough bytes to pass the threshold
    big = [root_span(T1, f"{1:016x}")] + [
        llm_span(T1, f"{i + 2:016x}", f"{1:016x}", f"q{i} {filler}") for i in range(n)
    ]
    bad = [llm_span(T2, f"{i + 1:016x}", None, f"b{i}") for i in range(CHUNK_SPANS + 5)]
    bad.append(
        {
            **llm_span(T2, f"{9999:016x}", None, "late"),
            "name": "",
            "attributes": _attrs(gen_ai__operation__name="execute_tool"),
        }
    )
    body = json.dumps(payload(*big, *bad)).encode()
    assert len(body) >= _parse_pool.PROCESS_MIN_BYTES
    async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200
        answer = await r.json()
    assert answer["partialSuccess"]["rejectedSpans"] == len(bad)
    ((_, span_ids),) = (await _contents(store)).items()
    assert span_ids == [f"{i + 2:016x}" for i in range(n)]
