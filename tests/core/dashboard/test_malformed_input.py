"""Issue 26 item 9 (beyond OTLP): bad input anywhere is a 4xx or a problem line, never a 500 or a crash.

Non-UTF-8 bytes in the dashboard's auth header or cookie; a malformed proxy ``llm`` span (``request`` not an
object) in the dashboard's rollout page, in ``build_transitions`` and in ``Trainer.dev``; a span that names
itself as its parent in the dashboard's tree. Real store server on loopback, real HTTP (raw bytes where a
client library would refuse to send them)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

import tether
from tether import spans
from tether.dashboard.trace import build_tree
from tether.server import start_server
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, Reply, text
from tether.training.signal.transitions import build_transitions
from tether.types import AttemptStatus, RolloutSpec, Span, SpanKind

BAD_LLM = {"request": "not-a-dict", "choices": [{"message": "also not"}]}


async def _raw_get(port: int, path: str, header: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\nConnection: close\r\n\r\n"
    )
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


@pytest.mark.parametrize(
    "header",
    [
        b"Authorization: Bearer \xff\xfe\xfd",
        b"Cookie: tether_dashboard_token=\xff\xfe",
        b"Authorization: \xc3\x28",
    ],
)
async def test_non_utf8_auth_bytes_are_a_401_not_a_500(header: bytes) -> None:
    store = open_store("memory:")
    async with await start_server(store, token="s3cret") as server:
        assert await _raw_get(server.port, "/dashboard/api/sources", header) == 401
        assert await _raw_get(server.port, "/dashboard/api/sources?token=%FF%FE", b"X-A: b") == 401
        assert await _raw_get(server.port, "/v1/health", header) == 401


async def _rollout_with(store: tether.Store, attributes: list[tuple[str, dict[str, Any], str | None]]) -> str:
    (rollout,) = await store.enqueue([RolloutSpec(input="x")])
    ((_, attempt),) = await store.dequeue("w")
    batch = []
    for span_id, attrs, parent in attributes:
        kind = SpanKind.LLM if "request" in attrs else SpanKind.OTHER
        name = spans.LLM_CALL if kind == SpanKind.LLM else "step"
        batch.append(Span(rollout.rollout_id, attempt.attempt_id, kind, name, None, attrs, span_id, parent))
    await store.add_spans(batch)
    await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
    return rollout.rollout_id


async def test_the_rollout_page_shows_a_malformed_llm_span_and_a_self_parented_span() -> None:
    store = open_store("memory:")
    rollout_id = await _rollout_with(store, [("bad", BAD_LLM, None), ("loop", {"x": 1}, "loop")])
    async with await start_server(store) as server, aiohttp.ClientSession() as http:
        url = f"{server.url}/dashboard/api/rollout?source=store&id={rollout_id}"
        async with http.get(url) as r:
            assert r.status == 200, await r.text()
            tree = (await r.json())["tree"]
    assert [n["span_id"] for n in tree] == ["bad", "loop"]
    assert "malformed" in tree[0]["error"] and "'request' is str" in tree[0]["error"]


def test_a_span_naming_itself_or_a_later_span_as_parent_stays_in_the_tree() -> None:
    found = [
        Span("r", "a", SpanKind.OTHER, "self", span_id="s1", parent_id="s1", sequence=0),
        Span("r", "a", SpanKind.OTHER, "cycle-a", span_id="s2", parent_id="s3", sequence=1),
        Span("r", "a", SpanKind.OTHER, "cycle-b", span_id="s3", parent_id="s2", sequence=2),
    ]
    tree = build_tree(found)
    assert [n["span_id"] for n in tree] == ["s1", "s2"] and [c["span_id"] for c in tree[1]["children"]] == ["s3"]


async def test_build_transitions_names_a_malformed_llm_span_as_a_problem() -> None:
    store = open_store("memory:")
    rollout_id = await _rollout_with(store, [("bad", BAD_LLM, None)])
    rollout = await store.get_rollout(rollout_id)
    (attempt,) = await store.get_attempts(rollout_id)
    report = build_transitions(rollout, await store.get_spans(attempt.attempt_id))
    assert report.transitions == []
    assert any("span bad" in p and "malformed" in p for p in report.problems)


def _answer(request: dict[str, Any]) -> Reply:
    return text("ok")


def _agent_with_a_bad_span(task: str) -> str:
    tether.emit_span(spans.LLM_CALL, BAD_LLM, kind=SpanKind.LLM)
    return "done"


async def test_trainer_dev_reports_a_malformed_llm_span_instead_of_raising() -> None:
    agent = tether.wrap(_agent_with_a_bad_span, reward=lambda t, o: 1.0, adapter="openai")
    async with FakeLLM(handler=_answer) as llm:
        report = await tether.Trainer(model=llm.base_url, progress=False).adev(agent, ["x"])
    assert any("malformed" in p for p in report.all_problems), report.all_problems
    assert "malformed" in str(report)
