"""``OTelSpan`` records as the OpenTelemetry SDK's finished spans (imported only once an exporter runs).

tether converts spans it already recorded, with their own ids and times, so it builds the SDK's
``ReadableSpan`` (what a span processor receives when a span ends) directly rather than starting live spans.
"""

from __future__ import annotations

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace.status import Status, StatusCode

from tether.otel.genai import OTelSpan

_SCOPE = InstrumentationScope("tether", "0.1.0")
_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)
_KINDS = {"client": trace_api.SpanKind.CLIENT, "internal": trace_api.SpanKind.INTERNAL}


def readable_span(record: OTelSpan, resource: Resource) -> ReadableSpan:
    context = trace_api.SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = (
        trace_api.SpanContext(record.trace_id, record.parent_id, is_remote=False, trace_flags=_SAMPLED)
        if record.parent_id is not None
        else None
    )
    status = Status(StatusCode.ERROR, record.error) if record.error is not None else Status(StatusCode.UNSET)
    return ReadableSpan(
        name=record.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=record.attributes,
        kind=_KINDS[record.kind],
        status=status,
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=_SCOPE,
    )
