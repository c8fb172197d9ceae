"""A minimal OTLP/HTTP trace receiver for the tests: a real stdlib HTTP server on loopback, in a thread, that
decodes each ``POST /v1/traces`` body with opentelemetry-proto and keeps the spans as plain dicts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Received:
    """What the receiver got: one dict per span, and the content types of the requests."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    url: str = ""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _decode(body: bytes) -> list[dict[str, Any]]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "status": span.status.code,
                        "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                    }
                )
    return out


@contextmanager
def otlp_receiver() -> Iterator[Received]:
    received = Received()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            with lock:
                received.content_types.append(self.headers.get("Content-Type") or "")
                received.spans.extend(_decode(body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def messages(span: dict[str, Any], key: str) -> Any:
    """A span's JSON-string attribute, parsed."""
    return json.loads(span["attributes"][key])
