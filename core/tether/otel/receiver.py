"""``POST /v1/traces`` on the store server: OTLP/HTTP traces (protobuf or JSON) in, imported rollouts out.

An exporter sends a trace's spans as they end, often over several requests (children before their root), so
the receiver holds each trace's spans until its root span (the one with no parent) has arrived, then imports
the trace (``tether.otel.ingest``). A trace whose root never comes is imported ``max_wait_s`` after its last
span, at the next request or when the server stops. Imports run one at a time. Protobuf bodies need
``tether[otel]`` (opentelemetry-proto); JSON bodies need nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiohttp import web

from tether.otel.ingest import convert, import_traces
from tether.otel.otlp import OtlpError, OtlpSpan, parse_json, parse_protobuf
from tether.store.base import Store

_log = logging.getLogger(__name__)
PATH = "/v1/traces"


@dataclass(slots=True)
class _Pending:
    spans: list[OtlpSpan] = field(default_factory=list)
    last_seen: float = 0.0


class TraceReceiver:
    """Buffers OTLP spans per trace and imports each complete trace into ``store``."""

    def __init__(self, store: Store, max_wait_s: float = 30.0) -> None:
        self.store = store
        self.max_wait_s = max_wait_s
        self.imported: list[str] = []  # rollout ids, in import order
        self._pending: dict[str, _Pending] = {}
        self._lock = asyncio.Lock()

    async def receive(self, items: list[OtlpSpan], now: float | None = None) -> list[str]:
        """Take ``items``; import every trace now complete (or waited for long enough). Returns new rollout ids."""
        now = time.monotonic() if now is None else now
        for s in items:
            pending = self._pending.setdefault(s.trace_id, _Pending())
            pending.spans.append(s)
            pending.last_seen = now
        ready = [
            tid
            for tid, p in self._pending.items()
            if any(not s.parent_id for s in p.spans) or now - p.last_seen >= self.max_wait_s
        ]
        return await self._import(ready)

    async def flush(self) -> list[str]:
        """Import every trace held, complete or not."""
        return await self._import(list(self._pending))

    async def _import(self, trace_ids: list[str]) -> list[str]:
        if not trace_ids:
            return []
        batch = [s for tid in trace_ids for s in self._pending.pop(tid).spans]
        async with self._lock:
            ids = await import_traces(self.store, convert(batch))
        self.imported.extend(ids)
        return ids


_RECEIVER_KEY = web.AppKey("tether_otlp_receiver", TraceReceiver)


async def _traces(request: web.Request) -> web.Response:
    body = await request.read()
    content_type = request.content_type
    receiver = request.app[_RECEIVER_KEY]
    try:
        if content_type == "application/x-protobuf":
            items = parse_protobuf(body)
        elif content_type == "application/json":
            items = parse_json(body)
        else:
            raise OtlpError(f"unsupported Content-Type {content_type!r}: send application/x-protobuf or JSON")
    except ImportError as exc:
        return web.json_response({"error": {"type": "Unsupported", "message": str(exc)}}, status=415)
    except OtlpError as exc:
        return web.json_response({"error": {"type": "InvalidInput", "message": str(exc)}}, status=400)
    await receiver.receive(items)
    if content_type == "application/x-protobuf":  # an empty ExportTraceServiceResponse
        return web.Response(body=b"", content_type="application/x-protobuf")
    return web.json_response({})


async def _flush_on_shutdown(app: web.Application) -> None:
    try:
        await app[_RECEIVER_KEY].flush()
    except Exception:
        _log.exception("importing the traces held at shutdown failed")


def mount(app: web.Application, store: Store) -> TraceReceiver:
    """Serve ``POST /v1/traces`` on ``app``, importing into ``store``; returns the receiver."""
    receiver = TraceReceiver(store)
    app[_RECEIVER_KEY] = receiver
    app.router.add_post(PATH, _traces)
    app.on_shutdown.append(_flush_on_shutdown)
    return receiver
