"""Traces from elsewhere as tether rollouts: OTLP spans following the OpenTelemetry GenAI conventions or
OpenInference's, grouped by trace, become rollouts whose spans are tether's own.

Each trace becomes one rollout with one attempt (ended ``failed`` when its root span's status is ERROR), written
by ``Store.import_rollout``: finished from the start (never queued, so no runner ever takes it), atomically,
keyed by the trace id, so a trace sent again or in parts adds to one rollout, each span once (by its id). An
LLM span (``gen_ai.operation.name`` ``chat`` / ``text_completion`` / ``generate_content``, or OpenInference's
``LLM`` kind) becomes an ``llm`` span in the proxy's layout (``spans.ProxyLLMAttributes``): request messages,
tools and parameters, the choices, usage, model, with no token ids unless the trace has them
(``token_ids_available`` False). A tool span (``execute_tool``, OpenInference's ``TOOL``) becomes a ``tool``
span. The sub-agent is the span's ``gen_ai.agent.name`` (OpenInference: ``agent.name``) or its nearest
ancestor's (an ``invoke_agent`` or ``AGENT`` span). Rollouts carry ``spans.IMPORTED`` metadata (where they
came from), spans a ``spans.IMPORTED`` attribute. Other spans (chains, retrievers) are counted, not kept.
How each convention's attributes are read is in ``tether.otel._attributes``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import spans
from tether.otel._attributes import llm_attributes, tool_attributes
from tether.otel.messages import maybe_json
from tether.otel.otlp import OtlpSpan
from tether.store.base import ImportedRollout, Store, import_id, validate_import
from tether.store.errors import InvalidInput, NotFound
from tether.types import Mode, Span, SpanKind, new_id

CHUNK_SPANS = 250  # spans of one trace written per store call
_LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}
WORKER = "tether-import"
_FUNCTION = "tool_call.function."


@dataclass(slots=True)
class ImportedTrace:
    """One trace, converted: the rollout's input and output, its spans (rollout and attempt ids unset)."""

    trace_id: str
    input: Any
    output: Any
    spans: list[Span]
    conventions: list[str]
    error: str | None = None
    skipped: int = 0  # spans of the trace that are neither LLM calls nor tool calls
    service: str | None = None
    start: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    span_count: int = 0  # OTLP spans of the trace in this batch
    rejected: str | None = None  # why the trace could not be converted
    checked: bool = False  # its spans passed ``validate_import`` already, as a whole (``_parse_pool``)


def convert(otlp_spans: Sequence[OtlpSpan]) -> list[ImportedTrace]:
    """The traces among ``otlp_spans`` that hold at least one LLM or tool call, or their root span (a later
    part of a trace imported earlier), in order of first start."""
    by_trace: dict[str, list[OtlpSpan]] = defaultdict(list)
    for s in otlp_spans:
        by_trace[s.trace_id].append(s)
    out = [
        t
        for t in (_checked_trace(tid, items) for tid, items in by_trace.items())
        if t.spans or t.rejected or any(not s.parent_id for s in by_trace[t.trace_id])
    ]
    return sorted(out, key=lambda t: t.start)


def _checked_trace(trace_id: str, items: list[OtlpSpan]) -> ImportedTrace:
    """``_trace``, or a trace marked rejected when its spans cannot be converted: the others still import."""
    try:
        return _trace(trace_id, items)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        reason = f"its spans are not GenAI/OpenInference spans tether can read ({type(exc).__name__}: {exc})"
        return ImportedTrace(trace_id, None, None, [], [], rejected=reason, span_count=len(items))


@dataclass(slots=True)
class ImportOutcome:
    """What ``import_traces`` did: the rollouts it wrote or added to, and the traces the store refused."""

    rollout_ids: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # trace id -> why
    rejected_spans: int = 0


async def import_traces(
    store: Store, traces: Sequence[ImportedTrace], *, mode: Mode = Mode.TRAIN
) -> ImportOutcome:
    """Write each of ``traces`` into ``store`` as a finished rollout (``Store.import_rollout``: atomic, never
    queued, idempotent by trace id and span id), one trace at a time.

    A trace sent again, or in parts (an exporter sends spans as they end), adds to the same rollout. A trace
    the store refuses (``InvalidInput``: say, a NaN time) is reported in ``rejected`` and the others are still
    written; any other store error (the store is down) is raised, after the traces before it were written.
    """
    out = ImportOutcome()
    await import_into(store, traces, mode, out)
    return out


async def import_into(store: Store, traces: Sequence[ImportedTrace], mode: Mode, out: ImportOutcome) -> None:
    """``import_traces``, adding to ``out``."""
    for trace in traces:
        if trace.rejected:
            out.rejected[trace.trace_id] = trace.rejected
            out.rejected_spans += trace.span_count
            continue
        item = ImportedRollout(
            key=trace.trace_id,
            input=trace.input,
            output=trace.output,
            error=trace.error,
            mode=mode,
            metadata={
                spans.IMPORTED: {
                    "source": "otlp",
                    "trace_id": trace.trace_id,
                    "conventions": trace.conventions,
                    "service": trace.service,
                    "skipped_spans": trace.skipped,
                },
                **trace.metadata,
            },
            spans=trace.spans,
            worker_id=WORKER,
        )
        if not trace.spans:  # only the root of a trace whose calls came earlier: fill in the outcome, if any
            try:
                await store.get_rollout(import_id(trace.trace_id)[0])
            except NotFound:
                continue
        try:
            if not trace.checked:
                validate_import(item)  # the whole trace, before any part of it is written
            # a huge trace goes in parts of CHUNK_SPANS (each atomic, the first creates the rollout), so one
            # write never holds the store (or a server's event loop) for long; a retry completes a cut one
            for start in range(0, max(len(trace.spans), 1), CHUNK_SPANS):
                item.spans = trace.spans[start : start + CHUNK_SPANS]
                result = await store.import_rollout(item)
                await asyncio.sleep(0)  # let a server's other requests in between writes
        except InvalidInput as exc:
            out.rejected[trace.trace_id] = str(exc)
            out.rejected_spans += trace.span_count
            continue
        out.rollout_ids.append(result.rollout_id)


# -- one trace --------------------------------------------------------------------------------------------


def _trace(trace_id: str, items: list[OtlpSpan]) -> ImportedTrace:
    items = sorted(items, key=lambda s: s.start)
    by_id = {s.span_id: s for s in items}
    converted: list[Span] = []
    tether_ids: dict[str, str] = {}
    conventions: set[str] = set()
    skipped = 0
    for s in items:
        kind, convention = _classify(s)
        if kind is None:
            skipped += 1
            continue
        conventions.add(convention)
        agent = _agent(s, by_id)
        span_id = s.span_id or new_id("sp")  # the trace's own id: a span sent twice is stored once
        if kind == SpanKind.LLM:
            span = Span("", "", SpanKind.LLM, spans.LLM_CALL, agent, llm_attributes(s, convention), s.span_id)
        else:
            name, attributes = tool_attributes(s, convention)
            span = Span("", "", SpanKind.TOOL, name, agent, attributes, span_id)
        span.attributes[spans.IMPORTED] = True
        span.start_time, span.end_time = s.start, max(s.end, s.start)
        parent = _converted_ancestor(s, by_id, tether_ids)
        span.parent_id = parent
        tether_ids[s.span_id] = span.span_id
        converted.append(span)
    roots = [s for s in items if not s.parent_id or s.parent_id not in by_id]
    root = roots[0] if roots else items[0]
    llm = [c for c in converted if c.kind == SpanKind.LLM]
    return ImportedTrace(
        trace_id=trace_id,
        input=_input(root, llm),
        output=_output(root, llm),
        spans=converted,
        conventions=sorted(conventions),
        error=next((s.error for s in roots if s.error), None),
        skipped=skipped,
        span_count=len(items),
        service=root.resource.get("service.name"),
        start=items[0].start if items else 0.0,
    )


def _classify(s: OtlpSpan) -> tuple[SpanKind | None, str]:
    a = s.attributes
    op = a.get("gen_ai.operation.name")
    if op in _LLM_OPERATIONS:
        return SpanKind.LLM, "gen_ai"
    if op == "execute_tool":
        return SpanKind.TOOL, "gen_ai"
    oi = str(a.get("openinference.span.kind") or "").upper()
    if oi == "LLM":
        return SpanKind.LLM, "openinference"
    if oi == "TOOL":
        return SpanKind.TOOL, "openinference"
    if op is None and "gen_ai.prompt.0.role" in a:  # OpenLLMetry's indexed prompt attributes
        return SpanKind.LLM, "gen_ai"
    return None, ""


def _agent(s: OtlpSpan, by_id: dict[str, OtlpSpan]) -> str | None:
    seen: set[str] = set()
    node: OtlpSpan | None = s
    while node is not None and node.span_id not in seen:
        seen.add(node.span_id)
        a = node.attributes
        name = a.get("gen_ai.agent.name") or a.get("agent.name")
        if not name and str(a.get("openinference.span.kind") or "").upper() == "AGENT":
            name = node.name
        if name:
            return str(name)
        node = by_id.get(node.parent_id or "")
    return None


def _converted_ancestor(s: OtlpSpan, by_id: dict[str, OtlpSpan], tether_ids: dict[str, str]) -> str | None:
    node = by_id.get(s.parent_id or "")
    seen: set[str] = set()
    while node is not None and node.span_id not in seen:
        seen.add(node.span_id)
        if node.span_id in tether_ids:
            return tether_ids[node.span_id]
        node = by_id.get(node.parent_id or "")
    return None


# -- the rollout's input and output -----------------------------------------------------------------------


def _input(root: OtlpSpan, llm: list[Span]) -> Any:
    for call in _calls(llm):
        for message in call.messages:
            if message.get("role") == "user":
                return message.get("content")
    return _value(root, "input")


def _output(root: OtlpSpan, llm: list[Span]) -> Any:
    if root.attributes.get("output.value") is not None:
        return _value(root, "output")
    for call in reversed(_calls(llm)):
        for choice in call.choices:
            content = (choice.get("message") or {}).get("content")
            if content:
                return content
    return None


def _calls(llm: list[Span]) -> list[spans.ProxyCall]:
    return [call for call in map(spans.proxy_call, llm) if call is not None]


def _value(s: OtlpSpan, which: str) -> Any:
    """OpenInference's ``input.value`` / ``output.value``: parsed when its mime type says JSON."""
    value = s.attributes.get(f"{which}.value")
    return maybe_json(value) if s.attributes.get(f"{which}.mime_type") == "application/json" else value
