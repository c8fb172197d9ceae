"""OTLP trace payloads (JSON, protobuf) as flat ``OtlpSpan`` records: ids in hex, times in seconds, attributes
as plain Python values.

JSON follows OTLP/JSON (``resourceSpans`` → ``scopeSpans`` → ``spans``, hex ids, ``AnyValue`` objects; the
snake_case spelling is accepted too); a file may hold one request or one per line (the OpenTelemetry
Collector's file exporter). Protobuf needs ``opentelemetry-proto`` (``tether[otel]``), imported on first use.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tether import _json


@dataclass(slots=True)
class OtlpSpan:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: float
    end: float
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the status message when the span's status is ERROR
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpError(ValueError):
    """The payload is not an OTLP trace export."""


def parse_json(data: bytes | str) -> list[OtlpSpan]:
    """The spans of an OTLP/JSON export request, or of a file with one request per line."""
    try:
        docs = [_json.loads(data)]
    except ValueError:
        text = data.decode() if isinstance(data, bytes) else data
        try:
            docs = [_json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise OtlpError(f"not OTLP/JSON: {exc}") from None
    out: list[OtlpSpan] = []
    for doc in docs:
        if not isinstance(doc, dict) or not ("resourceSpans" in doc or "resource_spans" in doc):
            raise OtlpError("not an OTLP trace export: expected an object with 'resourceSpans'")
        out.extend(_json_spans(doc))
    return out


def parse_protobuf(data: bytes) -> list[OtlpSpan]:
    """The spans of an OTLP/protobuf ``ExportTraceServiceRequest``."""
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError as exc:
        raise ImportError('reading OTLP protobuf needs the otel extra: pip install "tether[otel]"') from exc
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        raise OtlpError(f"not an OTLP/protobuf trace export: {exc}") from None
    out: list[OtlpSpan] = []
    for rs in request.resource_spans:
        resource = {kv.key: _proto_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                error = (s.status.message or "error") if s.status.code == 2 else None
                out.append(
                    OtlpSpan(
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex() or None,
                        s.name,
                        s.start_time_unix_nano / 1e9,
                        s.end_time_unix_nano / 1e9,
                        {kv.key: _proto_value(kv.value) for kv in s.attributes},
                        error,
                        resource,
                    )
                )
    return out


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    return obj[camel] if camel in obj else obj.get(snake)


def _json_spans(doc: dict[str, Any]) -> Iterator[OtlpSpan]:
    for rs in _get(doc, "resourceSpans", "resource_spans") or []:
        resource = _attributes((rs.get("resource") or {}).get("attributes"))
        for ss in _get(rs, "scopeSpans", "scope_spans") or []:
            for s in ss.get("spans") or []:
                status = s.get("status") or {}
                code = status.get("code")
                failed = code in (2, "STATUS_CODE_ERROR")
                yield OtlpSpan(
                    _id(_get(s, "traceId", "trace_id")),
                    _id(_get(s, "spanId", "span_id")),
                    _id(_get(s, "parentSpanId", "parent_span_id")) or None,
                    str(s.get("name") or ""),
                    int(_get(s, "startTimeUnixNano", "start_time_unix_nano") or 0) / 1e9,
                    int(_get(s, "endTimeUnixNano", "end_time_unix_nano") or 0) / 1e9,
                    _attributes(s.get("attributes")),
                    (status.get("message") or "error") if failed else None,
                    resource,
                )


def _id(value: Any) -> str:
    """A trace or span id as lowercase hex (OTLP/JSON uses hex; base64 from generic protobuf-JSON is accepted)."""
    if not value:
        return ""
    text = str(value)
    try:
        int(text, 16)
        return text.lower()
    except ValueError:
        return base64.b64decode(text).hex()


def _attributes(items: Any) -> dict[str, Any]:
    if isinstance(items, dict):  # already a mapping
        return dict(items)
    return {kv["key"]: _json_value(kv.get("value") or {}) for kv in items or [] if isinstance(kv, dict)}


def _json_value(value: dict[str, Any]) -> Any:
    for key in ("stringValue", "string_value", "boolValue", "bool_value", "doubleValue", "double_value"):
        if key in value:
            return value[key]
    for key in ("intValue", "int_value"):
        if key in value:
            return int(value[key])
    for key in ("arrayValue", "array_value"):
        if key in value:
            return [_json_value(v) for v in (value[key] or {}).get("values") or []]
    for key in ("kvlistValue", "kvlist_value"):
        if key in value:
            return _attributes((value[key] or {}).get("values"))
    for key in ("bytesValue", "bytes_value"):
        if key in value:
            return value[key]
    return None


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_proto_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _proto_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind) if kind else None
