"""OpenTelemetry: tether's spans out as GenAI-convention spans (``export``), OTLP traces in (``ingest``).

Only ``export.OTLPExport`` is imported with tether; the OpenTelemetry SDK loads when an exporter starts.
"""
