"""Parsing and converting large OTLP bodies in a worker process, handed back in bounded pieces.

A 20 MB OTLP/JSON body takes one ``orjson.loads`` call that holds the GIL throughout (seconds on a busy
machine), then seconds of Python converting it: in a thread, the store server's event loop would stall on
the first. So a body over ``PROCESS_MIN_BYTES`` is parsed, converted and checked (``validate_import``, so a
bad trace is rejected whole before any part of it is written) in a worker process, which returns the traces
pickled in pieces of at most ``ingest.CHUNK_SPANS`` spans; the server unpickles one piece at a time and
writes it before the next. Smaller bodies are parsed in a thread.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from tether.otel.ingest import CHUNK_SPANS, ImportedTrace, convert
from tether.otel.otlp import OtlpError, parse_json, parse_protobuf
from tether.store.base import ImportedRollout, validate_import
from tether.store.errors import InvalidInput

PROTOBUF, JSON = "application/x-protobuf", "application/json"
PROCESS_MIN_BYTES = 2 * 1024 * 1024

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def parse(body: bytes, content_type: str) -> list[ImportedTrace]:
    """The traces of an OTLP body (``OtlpError``; ``ImportError`` for protobuf without ``tether[otel]``)."""
    if content_type == PROTOBUF:
        return convert(parse_protobuf(body))
    if content_type == JSON:
        return convert(parse_json(body))
    raise OtlpError(f"unsupported Content-Type {content_type!r}: send {PROTOBUF} or {JSON}")


def _pieces(body: bytes, content_type: str) -> list[bytes]:
    """In the worker: the traces, each checked whole, pickled in pieces of at most ``CHUNK_SPANS`` spans."""
    out = []
    for trace in parse(body, content_type):
        if not trace.rejected:
            try:
                validate_import(ImportedRollout(key=trace.trace_id, spans=trace.spans))
            except InvalidInput as exc:
                trace = replace(trace, spans=[], rejected=str(exc))
        for start in range(0, max(len(trace.spans), 1), CHUNK_SPANS):
            piece = replace(trace, spans=trace.spans[start : start + CHUNK_SPANS], checked=True)
            out.append(pickle.dumps(piece, protocol=pickle.HIGHEST_PROTOCOL))
    return out


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # spawn, not fork: the server runs threads (SQLite's checkpointer...) that a fork would copy mid-state
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


async def traces_in_pieces(body: bytes, content_type: str) -> list[bytes] | list[ImportedTrace]:
    """The traces of ``body``: parsed in a thread when small, else in the worker process as pickled pieces."""
    if len(body) < PROCESS_MIN_BYTES:
        return await asyncio.to_thread(parse, body, content_type)
    return await asyncio.get_running_loop().run_in_executor(_executor(), _pieces, body, content_type)
