"""``POST /v1/traces`` on the store server: OTLP/HTTP traces (protobuf or JSON) in, imported rollouts out.

Every request's spans are written before it is answered: each trace of the request becomes (or adds to) one
imported rollout (``tether.otel.ingest``, ``Store.import_rollout``: written finished, never queued, atomic,
idempotent by trace and span id). Nothing is held in memory between requests, so an exporter that sends a
trace in parts (children before their root), or sends a batch again after a lost answer, gets one rollout
with each span once, and an answered request survives a crash of the server.

Answers, as OTLP/HTTP specifies:

- 200 with an empty response when every trace was written;
- 200 with ``partial_success`` (``rejected_spans``, ``error_message``) when the store refused some traces
  (the others were written);
- 400 for a body that is not an OTLP trace export (never retried by exporters), 415 for another content type
  (the store server's middleware refuses those first: ``tether._net.refusal``);
- 503 when the store failed (say, it is down): the exporter retries, and the retry adds only what is missing.

Parsing and converting run in a worker thread, or for a large body in a worker process that hands the traces
back in bounded pieces (``tether.otel._parse_pool``), and the import yields to the event loop between pieces,
so a large upload does not stall the server's other requests. Protobuf bodies need ``tether[otel]``
(opentelemetry-proto); JSON bodies need nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import pickle

from aiohttp import web

from tether import _json
from tether.otel._parse_pool import traces_in_pieces
from tether.otel.ingest import ImportOutcome, import_into
from tether.otel.otlp import OtlpError
from tether.store.base import Store
from tether.store.errors import StoreError
from tether.types import Mode

_log = logging.getLogger(__name__)
PATH = "/v1/traces"
_PROTOBUF, _JSON = "application/x-protobuf", "application/json"
MAX_PARSING = 2  # uploads parsed at once; more wait their turn (each holds its body and spans in memory)


class TraceReceiver:
    """Imports the traces of each OTLP request into ``store``; ``imported`` counts the rollouts written to."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.imported = 0
        self._parsing = asyncio.Semaphore(MAX_PARSING)

    async def receive(self, body: bytes, content_type: str) -> ImportOutcome:
        """Parse ``body`` (``OtlpError``, ``ImportError`` for protobuf without the extra) and import its traces
        (``StoreError`` when the store failed; the traces before the failure are written)."""
        async with self._parsing:
            parsed = await traces_in_pieces(body, content_type)
        outcome = ImportOutcome()
        for piece in parsed:  # a pickled piece is unpickled only when its turn comes: bounded work per step
            trace = pickle.loads(piece) if isinstance(piece, bytes) else piece
            await import_into(self.store, [trace], Mode.TRAIN, outcome)
        self.imported += len(set(outcome.rollout_ids))
        return outcome


_RECEIVER_KEY = web.AppKey("tether_otlp_receiver", TraceReceiver)


def _answer(content_type: str, rejected_spans: int = 0, message: str = "") -> web.Response:
    """An ``ExportTraceServiceResponse`` in the request's encoding, with ``partial_success`` if any was refused."""
    if content_type == _PROTOBUF:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        response = ExportTraceServiceResponse()
        if rejected_spans or message:
            response.partial_success.rejected_spans = rejected_spans
            response.partial_success.error_message = message
        return web.Response(body=response.SerializeToString(), content_type=_PROTOBUF)
    body = {"partialSuccess": {"rejectedSpans": rejected_spans, "errorMessage": message}} if message else {}
    return web.Response(body=_json.dumps(body), content_type=_JSON)


def _error(status: int, type_name: str, message: str) -> web.Response:
    body = _json.dumps({"error": {"type": type_name, "message": message}})
    return web.Response(status=status, body=body, content_type=_JSON)


async def _traces(request: web.Request) -> web.Response:
    body = await request.read()
    content_type = request.content_type
    try:
        outcome = await request.app[_RECEIVER_KEY].receive(body, content_type)
    except ImportError as exc:
        return _error(415, "Unsupported", str(exc))
    except OtlpError as exc:
        if content_type not in (_PROTOBUF, _JSON):
            return _error(415, "Unsupported", str(exc))
        return _error(400, "InvalidInput", str(exc))
    except StoreError as exc:  # not written (or only the traces before): the exporter retries, idempotently
        _log.warning("importing traces failed; asked the exporter to retry: %s", exc)
        return _error(503, "Unavailable", f"the store could not take the traces, retry later: {exc}")
    if not outcome.rejected:
        return _answer(content_type)
    message = "; ".join(f"trace {tid}: {why}" for tid, why in list(outcome.rejected.items())[:5])
    if len(outcome.rejected) > 5:
        message += f"; and {len(outcome.rejected) - 5} more trace(s)"
    return _answer(content_type, outcome.rejected_spans, message)


def mount(app: web.Application, store: Store) -> TraceReceiver:
    """Serve ``POST /v1/traces`` on ``app``, importing into ``store``; returns the receiver."""
    receiver = TraceReceiver(store)
    app[_RECEIVER_KEY] = receiver
    app.router.add_post(PATH, _traces)
    return receiver
