"""OTLP trace payloads (JSON, protobuf) as flat ``OtlpSpan`` records: ids in hex, times in seconds, attributes
as plain Python values.

JSON follows OTLP/JSON (``resourceSpans`` → ``scopeSpans`` → ``spans``, hex ids, ``AnyValue`` objects; the
snake_case spelling is accepted too); a file may hold one request or one per line (the OpenTelemetry
Collector's file exporter). Protobuf needs ``opentelemetry-proto`` (``tether[otel]``), imported on first use.
"""

from __future__ import annotations

import base64
import math
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
    """The spans of an OTLP/JSON export request, or of a file with one request per line. Anything that is not
    one raises ``OtlpError`` naming where (never another exception)."""
    try:
        docs = [_json.loads(data)]
    except ValueError:
        try:
            text = data.decode() if isinstance(data, bytes) else data
        except UnicodeDecodeError as exc:
            raise OtlpError(f"not OTLP/JSON: the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        try:
            docs = [_json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise OtlpError(f"not OTLP/JSON: {exc}") from None
    out: list[OtlpSpan] = []
    for doc in docs:
        if not isinstance(doc, dict) or not ("resourceSpans" in doc or "resource_spans" in doc):
            raise OtlpError("not an OTLP trace export: expected an object with 'resourceSpans'")
        try:
            out.extend(_json_spans(doc))
        except OtlpError:
            raise
        except RecursionError:
            raise OtlpError("not OTLP/JSON: attribute values nested too deeply") from None
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            OverflowError,
        ) as exc:  # a shape not checked below
            raise OtlpError(f"not OTLP/JSON: {type(exc).__name__}: {exc}") from None
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
    except (DecodeError, ValueError, RuntimeError) as exc:  # RuntimeError: upb's recursion limit
        raise OtlpError(f"not an OTLP/protobuf trace export: {exc}") from None
    try:
        return _proto_spans(request)
    except RecursionError:
        raise OtlpError("not an OTLP/protobuf trace export: attribute values nested too deeply") from None


def _proto_spans(request: Any) -> list[OtlpSpan]:
    out: list[OtlpSpan] = []
    for rs in request.resource_spans:
        resource = {kv.key: _proto_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                if len(s.trace_id) != 16 or len(s.span_id) != 8:
                    raise OtlpError(
                        f"span {s.name!r}: traceId must be 16 bytes and spanId 8 bytes, got "
                        f"{len(s.trace_id)} and {len(s.span_id)}"
                    )
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


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(f"{where} must be an array, got {type(value).__name__}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _json_spans(doc: dict[str, Any]) -> Iterator[OtlpSpan]:
    for i, rs in enumerate(_list(_get(doc, "resourceSpans", "resource_spans"), "resourceSpans")):
        where = f"resourceSpans[{i}]"
        rs = _object(rs, where)
        resource = _attributes(_object(rs.get("resource"), f"{where}.resource").get("attributes"), where)
        for j, ss in enumerate(_list(_get(rs, "scopeSpans", "scope_spans"), f"{where}.scopeSpans")):
            scope = f"{where}.scopeSpans[{j}]"
            for k, s in enumerate(_list(_object(ss, scope).get("spans"), f"{scope}.spans")):
                yield _json_span(_object(s, f"{scope}.spans[{k}]"), f"{scope}.spans[{k}]", resource)


def _json_span(s: dict[str, Any], where: str, resource: dict[str, Any]) -> OtlpSpan:
    status = _object(s.get("status"), f"{where}.status")
    failed = status.get("code") in (2, "STATUS_CODE_ERROR")
    message = status.get("message")
    trace_id = _id(_get(s, "traceId", "trace_id"), 16, f"{where}.traceId")
    span_id = _id(_get(s, "spanId", "span_id"), 8, f"{where}.spanId")
    if not trace_id or not span_id:
        raise OtlpError(f"{where}: a span needs a traceId and a spanId")
    return OtlpSpan(
        trace_id,
        span_id,
        _id(_get(s, "parentSpanId", "parent_span_id"), 8, f"{where}.parentSpanId") or None,
        str(s.get("name") or ""),
        _nanos(_get(s, "startTimeUnixNano", "start_time_unix_nano"), f"{where}.startTimeUnixNano"),
        _nanos(_get(s, "endTimeUnixNano", "end_time_unix_nano"), f"{where}.endTimeUnixNano"),
        _attributes(s.get("attributes"), where),
        (str(message) if message else "error") if failed else None,
        resource,
    )


_MAX_NANOS = 2**64 - 1


def _nanos(value: Any, where: str) -> float:
    """A ``fixed64`` time in nanoseconds (a JSON integer or decimal string) as seconds."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise OtlpError(f"{where} must be an integer number of nanoseconds, got {type(value).__name__}")
    try:
        number = int(value)
    except (ValueError, OverflowError):
        raise OtlpError(f"{where} must be an integer number of nanoseconds, got {str(value)[:40]!r}") from None
    if not 0 <= number <= _MAX_NANOS:
        raise OtlpError(f"{where} must be between 0 and 2**64-1 nanoseconds, got {str(value)[:40]}")
    return number / 1e9


def _id(value: Any, size: int, where: str) -> str:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex. OTLP/JSON sends hex; base64, as generic
    protobuf-JSON writes bytes, is accepted too."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise OtlpError(f"{where} must be a hex string, got {type(value).__name__}")
    if len(value) == 2 * size:
        try:
            return bytes.fromhex(value).hex()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise OtlpError(f"{where} must be {2 * size} hex digits ({size} bytes), got {value[:40]!r}")
    return raw.hex()


def _attributes(items: Any, where: str) -> dict[str, Any]:
    if isinstance(items, dict):  # already a mapping
        return {str(k): _finite(v) for k, v in items.items()}
    out: dict[str, Any] = {}
    for i, kv in enumerate(_list(items, f"{where}.attributes")):
        kv = _object(kv, f"{where}.attributes[{i}]")
        key = kv.get("key")
        if not isinstance(key, str):
            raise OtlpError(f"{where}.attributes[{i}] needs a string 'key'")
        out[key] = _json_value(_object(kv.get("value"), f"{where}.attributes[{key!r}]"), f"{where}.{key}")
    return out


def _json_value(value: dict[str, Any], where: str) -> Any:
    for key in ("stringValue", "string_value", "boolValue", "bool_value", "doubleValue", "double_value"):
        if key in value:
            return _finite(value[key])
    for key in ("intValue", "int_value"):
        if key in value:
            raw = value[key]
            try:
                if isinstance(raw, bool) or not isinstance(raw, int | str):
                    raise ValueError
                return int(raw)
            except ValueError:
                raise OtlpError(f"{where}: intValue must be an integer, got {str(raw)[:40]!r}") from None
    for key in ("arrayValue", "array_value"):
        if key in value:
            items = _list(_object(value[key], where).get("values"), where)
            return [_json_value(_object(v, where), where) for v in items]
    for key in ("kvlistValue", "kvlist_value"):
        if key in value:
            return _attributes(_object(value[key], where).get("values"), where)
    for key in ("bytesValue", "bytes_value"):
        if key in value:
            return value[key]
    return None


def _finite(value: Any) -> Any:
    """A double that JSON cannot hold (inf, nan) as its text; anything else as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_proto_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _proto_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return _finite(getattr(value, kind)) if kind else None
