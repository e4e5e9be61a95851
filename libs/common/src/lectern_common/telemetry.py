"""Tracing, metrics and JSON logs that carry trace ids.

Traces cross HTTP (``instrument_http_app``: an incoming W3C ``traceparent`` is continued) and
NATS (FastStream's telemetry middleware puts ``traceparent`` in message headers, from whatever
span is current when a handler publishes or requests), so one question is one trace from the
gateway through retriever and reranker. Spans and metrics are exported over OTLP/HTTP when
``LECTERN_OTLP_ENDPOINT`` is set; metrics are also served for Prometheus at ``GET /metrics``
(the instruments are in ``lectern_common.metrics``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

from fastapi import FastAPI
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pythonjsonlogger.json import JsonFormatter

from lectern_common.settings import BaseServiceSettings

#: probe endpoints: polled every few seconds by Kubernetes and compose, never traced
UNTRACED_PATHS = ("/healthz", "/readyz", "/metrics")


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` of the current span to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = f"{ctx.trace_id:032x}" if ctx.is_valid else None
        record.span_id = f"{ctx.span_id:016x}" if ctx.is_valid else None
        return True


@dataclass
class Telemetry:
    """The providers a service uses; ``shutdown`` flushes exporters."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    #: installed as the process' global providers (the first service set up in a process)
    installed: bool = False
    #: the metric readers that export by pushing (OTLP)
    push_readers: list[MetricReader] = field(default_factory=list)

    def shutdown(self) -> None:
        """Flush the exporters; stop them unless they are the process' global providers.

        Global providers stay open: a process hosting several services one after another
        (``lectern eval``, the benchmarks, the tests) keeps using them, and OpenTelemetry lets
        a process install them only once. Their exporters' threads end with the process.
        """
        if not self.installed:
            self.tracer_provider.shutdown()  # flushes first
            self.meter_provider.shutdown()
            return
        self.tracer_provider.force_flush()
        # only the pushing readers: a collection by the Prometheus reader would queue a
        # snapshot that the next scrape serves beside the current values
        for reader in self.push_readers:
            reader.force_flush()


def configure_logging(*, level: str, json_logs: bool, service_name: str) -> None:
    """Root logging: JSON lines with trace ids (or plain text for humans)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TraceContextFilter())
    if json_logs:
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s %(trace_id)s %(span_id)s",
                rename_fields={"levelname": "level", "asctime": "time"},
                static_fields={"service": service_name},
            )
        )
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {service_name} %(levelname)s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def setup_telemetry(settings: BaseServiceSettings) -> Telemetry:
    """Create providers for this service and install them globally (once per process)."""
    resource = Resource.create({"service.name": settings.service_name})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.otlp_endpoint.rstrip("/")
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
        )
        readers.append(
            PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))
        )
    push_readers = list(readers)
    installed = not isinstance(trace.get_tracer_provider(), TracerProvider)
    if installed:
        # the process' Prometheus registry, served at GET /metrics (once per process: the
        # reader registers a collector there)
        readers.append(PrometheusMetricReader())
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if installed:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        installed=installed,
        push_readers=push_readers,
    )


def prometheus_scrape() -> tuple[bytes, str]:
    """The Prometheus text exposition of this process' metrics, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def instrument_http_app(
    app: FastAPI, *, tracer_provider: trace.TracerProvider | None = None
) -> None:
    """Give every HTTP request a server span that continues an incoming ``traceparent``.

    Without ``tracer_provider`` the global one is used (installed by ``setup_telemetry`` when
    the app starts). The probes are not traced, and neither are the per-chunk ASGI
    ``send``/``receive`` calls (an SSE answer would otherwise make a span per token).
    """
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=tracer_provider,
        excluded_urls=",".join(f"{path}$" for path in UNTRACED_PATHS),
        exclude_spans=["receive", "send"],
    )
