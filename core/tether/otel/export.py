"""Export what tether captures as OpenTelemetry GenAI spans over OTLP/HTTP (``pip install "tether[otel]"``).

Off by default. ``Trainer(export=tether.OTLPExport(endpoint="http://collector:4318"))`` turns it on, and so
does the standard ``OTEL_TRACES_EXPORTER=otlp`` (then ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``…_HEADERS``, ``…_TIMEOUT`` configure it as for any OpenTelemetry
SDK; ``OTEL_SDK_DISABLED=true`` turns it off). The session hands each batch's finished rollouts to the
exporter (``SpanExporter.export``): every attempt becomes a root span and every captured span its child
(``tether.otel.genai``); the OpenTelemetry SDK's batch processor sends them from its own thread. Nothing here
imports OpenTelemetry until an exporter starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.store.base import Harvested

INSTALL_HINT = 'OpenTelemetry export needs the otel extra: pip install "tether[otel]"'
TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class OTLPExport:
    """Where and how to export: an OTLP/HTTP (protobuf) endpoint.

    ``endpoint``: the collector's base URL (``http://host:4318``; ``/v1/traces`` is added unless the URL
    already ends with it); None reads ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (default ``http://localhost:4318``). ``headers`` (e.g. an API key) and ``timeout_s`` likewise fall back
    to the ``OTEL_EXPORTER_OTLP_*`` variables. ``content=False`` leaves messages, tool arguments and results
    out of the spans. ``service_name`` is the resource's ``service.name``.
    """

    endpoint: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    content: bool = True
    service_name: str = "tether"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OTLPExport | None:
        """The export the standard variables ask for: one when ``OTEL_TRACES_EXPORTER`` names ``otlp`` (and
        ``OTEL_SDK_DISABLED`` is not ``true``), else None."""
        env = os.environ if environ is None else environ
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
        if "otlp" not in names:
            return None
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol != "http/protobuf":
            raise ValueError(
                f"tether exports OTLP over HTTP (http/protobuf), not {protocol!r}: "
                "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            )
        return cls(service_name=env.get("OTEL_SERVICE_NAME") or "tether")

    def traces_url(self) -> str | None:
        """The URL spans are posted to, or None where the exporter reads it from the environment."""
        if self.endpoint is None:
            return None
        url = self.endpoint.rstrip("/")
        return url if url.endswith(TRACES_PATH) else url + TRACES_PATH

    def start(self) -> SpanExporter:
        """An exporter for a session (imports OpenTelemetry; ``ImportError`` naming the extra if missing)."""
        return SpanExporter(self)


class SpanExporter:
    """Converts finished rollouts to GenAI spans and queues them on the OpenTelemetry SDK's batch processor."""

    def __init__(self, config: OTLPExport) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
        kwargs: dict[str, Any] = {}
        if config.traces_url() is not None:
            kwargs["endpoint"] = config.traces_url()
        if config.headers:
            kwargs["headers"] = dict(config.headers)
        if config.timeout_s is not None:
            kwargs["timeout"] = config.timeout_s
        self.config = config
        self.exported = 0  # spans handed to the processor
        self._resource = Resource.create({"service.name": config.service_name})
        self._processor = BatchSpanProcessor(OTLPSpanExporter(**kwargs))

    def export(self, items: Iterable[Harvested]) -> None:
        """Queue the spans of every attempt of ``items`` (finished rollouts with their attempts and spans)."""
        from tether.otel._sdk import readable_span
        from tether.otel.genai import attempt_spans

        for item in items:
            for attempt in item.attempts:
                mine = [s for s in item.spans if s.attempt_id == attempt.attempt_id]
                last = attempt is item.attempts[-1]
                for record in attempt_spans(item.rollout, attempt, mine, content=self.config.content, last=last):
                    self._processor.on_end(readable_span(record, self._resource))
                    self.exported += 1

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Send everything queued; False if it did not all go out in ``timeout_s`` (blocking)."""
        return bool(self._processor.force_flush(int(timeout_s * 1000)))

    def close(self) -> None:
        """Flush and stop the processor's thread (blocking)."""
        shutdown: Callable[[], object] = self._processor.shutdown  # (untyped in some SDK releases)
        shutdown()
