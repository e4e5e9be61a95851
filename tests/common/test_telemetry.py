"""Traces cross NATS hops in headers; logs are JSON lines carrying the trace id."""

import asyncio
import io
import json
import logging
import uuid
from typing import Any

import pytest
from faststream.nats import NatsMessage
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lectern_common.broker import create_broker
from lectern_common.telemetry import TraceContextFilter, configure_logging


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
            await producer.publish({"q": 1}, subject)
            trace_id = root.get_span_context().trace_id
        headers = await asyncio.wait_for(seen.get(), 5)
    assert f"{trace_id:032x}" in headers["traceparent"]
    await asyncio.sleep(0.1)
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {trace_id}
    assert trace.get_tracer_provider() is not None
