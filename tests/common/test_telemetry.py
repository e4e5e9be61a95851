"""Traces cross NATS hops in headers; logs are JSON lines carrying the trace id."""

import asyncio
import io
import json
import logging
import uuid
from typing import Any

import httpx
import pytest
from faststream.nats import NatsMessage
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from lectern_common.broker import create_broker
from lectern_common.service import create_service_app
from lectern_common.settings import ServiceHttpSettings
from lectern_common.telemetry import UNTRACED_PATHS, TraceContextFilter, configure_logging


def test_json_logs_carry_trace_and_span_ids() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    configure_logging(level="INFO", json_logs=True, service_name="svc")
    stream = io.StringIO()
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    with tracer.start_as_current_span("work") as span:
        logging.getLogger("x").info("hello %s", "world")
        expected = f"{span.get_span_context().trace_id:032x}"
    record = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert record["message"] == "hello world"
    assert record["service"] == "svc"
    assert record["trace_id"] == expected
    assert record["level"] == "INFO"
    assert any(isinstance(f, TraceContextFilter) for f in handler.filters)


@pytest.mark.integration
async def test_trace_context_travels_in_nats_headers(nats_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    subject = f"lectern.test.trace.{uuid.uuid4().hex[:6]}.v1"
    seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    consumer = create_broker(nats_url, service_name="consumer", tracer_provider=provider)

    @consumer.subscriber(subject)
    async def handle(body: dict[str, Any], message: NatsMessage) -> None:
        await seen.put(dict(message.headers))

    producer = create_broker(nats_url, service_name="producer", tracer_provider=provider)
    tracer = provider.get_tracer("test")
    async with consumer, producer:
        await consumer.start()
        await consumer.config.connection_state.connection.flush()
        await producer.start()
        with tracer.start_as_current_span("question") as root:
            trace_id = root.get_span_context().trace_id
            # the subscription may still be settling on a loaded machine: publish again
            # until one message arrives (each publish is its own producer span)
            headers: dict[str, Any] | None = None
            for _ in range(20):
                await producer.publish({"q": 1}, subject)
                try:
                    headers = await asyncio.wait_for(seen.get(), 1.0)
                    break
                except TimeoutError:
                    continue
        assert headers is not None, "no message arrived within 20 s"
    version, header_trace, header_parent, flags = headers["traceparent"].split("-")
    assert (version, int(header_trace, 16)) == ("00", trace_id)
    assert int(flags, 16) & 0x01, "sampled"
    await asyncio.sleep(0.1)
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id}
    # question -> the producer's span named in the header -> the consumer's process span
    by_id = {s.context.span_id: s for s in spans}
    sent = by_id[int(header_parent, 16)]
    assert sent.kind is SpanKind.PRODUCER
    assert sent.parent is not None and sent.parent.span_id == root.get_span_context().span_id
    processed = [
        s
        for s in spans
        if s.kind is SpanKind.CONSUMER
        and s.name.endswith("process")
        and s.parent is not None
        and s.parent.span_id == sent.context.span_id
    ]
    assert len(processed) == 1, "the consumer's process span is the child of the sent one"


async def test_service_app_continues_http_trace_context_and_skips_probes() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = ServiceHttpSettings(service_name="svc", log_json=False)
    broker = create_broker(settings.nats_url, service_name="svc", tracer_provider=provider)
    app = create_service_app(
        settings=settings, broker=broker, title="svc", tracer_provider=provider
    )
    seen: list[int] = []

    @app.get("/work")
    async def work() -> dict[str, str]:
        seen.append(trace.get_current_span().get_span_context().trace_id)
        return {"ok": "yes"}

    trace_id, parent_id = uuid.uuid4().int, uuid.uuid4().int >> 64
    traceparent = f"00-{trace_id:032x}-{parent_id:016x}-01"
    # no lifespan: nothing connects; /readyz answers 503 without NATS, which is fine here
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        response = await client.get("/work", headers={"traceparent": traceparent})
        assert response.status_code == 200
        (server,) = exporter.get_finished_spans()
        for path in UNTRACED_PATHS:
            await client.get(path, headers={"traceparent": traceparent})
    assert seen == [trace_id]
    assert server.kind is SpanKind.SERVER
    assert server.context.trace_id == trace_id
    assert server.parent is not None and server.parent.span_id == parent_id
    assert server.parent.is_remote
    assert "/work" in server.name
    assert len(exporter.get_finished_spans()) == 1, "the probes are not traced"


def test_a_stopped_service_leaves_the_global_providers_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Services hosted one after another in one process (``lectern eval``, the benchmarks)
    share the global providers: stopping one must not shut them down for the next (it did,
    and every later meter warned that a shut-down provider cannot provide one)."""
    from opentelemetry import metrics

    from lectern_common.telemetry import setup_telemetry

    for name in ("first-service", "second-service"):
        setup_telemetry(ServiceHttpSettings(service_name=name)).shutdown()
    with caplog.at_level(logging.WARNING):
        counter = metrics.get_meter("lectern.test").create_counter("lectern_test_total")
        counter.add(1)
    assert not [r for r in caplog.records if "shutdown" in r.getMessage().lower()]
