"""One question is one trace: the caller's ``traceparent`` over HTTP, the gateway's server
span, its NATS requests (memory recall, retrieve, rerank) and the responders handling them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
from faststream.nats import NatsMessage
from lectern_testing.chat import (
    Responders,
    ask,
    gateway_settings,
    new_session,
    seed_document,
    serve_gateway,
)
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from lectern_common.broker import QUEUE_GROUPS, create_broker
from lectern_common.events import (
    IndexChunksRequest,
    MemoryRecallRequest,
    RerankRequest,
    RetrieveRequest,
    Subjects,
)
from lectern_common.telemetry import UNTRACED_PATHS
from lectern_retriever import index_reads

pytestmark = pytest.mark.integration

MESSAGES_ROUTE = "/v1/sessions/{session_id}/messages"


def _traceparent_ids(header: str) -> tuple[int, int]:
    _, trace_id, parent_id, _ = header.split("-")
    return int(trace_id, 16), int(parent_id, 16)


async def _server_span(exporter: InMemorySpanExporter, trace_id: int) -> ReadableSpan:
    """The gateway's server span of the traced request (it ends once the stream is sent)."""
    for _ in range(200):
        for span in exporter.get_finished_spans():
            if span.kind is SpanKind.SERVER and span.context.trace_id == trace_id:
                return span
        await asyncio.sleep(0.01)
    raise AssertionError("no server span for the traced request")


class _Tap(SpanProcessor):
    """Sends ended spans to an exporter while enabled (a provider's processors stay)."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter
        self.enabled = True

    def on_end(self, span: ReadableSpan) -> None:
        if self.enabled:
            self.exporter.export([span])


async def _span_named(exporter: InMemorySpanExporter, trace_id: int, name: str) -> None:
    for _ in range(500):
        for span in exporter.get_finished_spans():
            if span.name == name and span.context.trace_id == trace_id:
                return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {name} span in the trace")


async def test_question_is_one_trace_from_http_through_the_nats_requests(
    nats_url: str, database_url: str, db_pool: Any, tenant_id: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stand_ins = Responders(pool=db_pool, memories=["struggled with the Calvin cycle"])
    # subject -> (the request's traceparent header, the trace current in the responder)
    seen: dict[str, tuple[str, int]] = {}
    responders = create_broker(nats_url, service_name="responders", tracer_provider=provider)

    def responder(
        subject: str, request_type: type[BaseModel], answer: Callable[[Any], Awaitable[BaseModel]]
    ) -> None:
        @responders.subscriber(subject, queue=QUEUE_GROUPS[subject])
        async def handle(body: dict[str, Any], message: NatsMessage) -> dict[str, Any]:
            current = trace.get_current_span().get_span_context().trace_id
            seen[subject] = (message.headers.get("traceparent", ""), current)
            reply = await answer(request_type.model_validate(body))
            return reply.model_dump(mode="json")

    responder(Subjects.RETRIEVE, RetrieveRequest, stand_ins.retrieve)
    responder(
        Subjects.INDEX_CHUNKS, IndexChunksRequest, partial(index_reads.answer_chunks, db_pool)
    )
    responder(Subjects.RERANK, RerankRequest, stand_ins.rerank)
    responder(Subjects.MEMORY_RECALL, MemoryRecallRequest, stand_ins.recall)

    await seed_document(db_pool, tenant_id=tenant_id)
    settings = gateway_settings(nats_url, database_url, memory_timeout_s=5.0)
    trace_id, caller_span_id = uuid.uuid4().int, uuid.uuid4().int >> 64
    traceparent = f"00-{trace_id:032x}-{caller_span_id:016x}-01"
    async with (
        responders,
        serve_gateway(settings, tracer_provider=provider) as gateway,
        httpx.AsyncClient(timeout=30) as client,
    ):
        await responders.start()
        await responders.config.connection_state.connection.flush()
        # the model-call and query spans come from the process' global tracer provider
        # (installed by the gateway's start-up): tap it for the length of the test
        tap = _Tap(exporter)
        global_provider = trace.get_tracer_provider()
        assert isinstance(global_provider, TracerProvider)
        global_provider.add_span_processor(tap)
        auth = gateway.token(tenant_id, "stu-1")
        session = await new_session(client, gateway, auth)
        got = await ask(
            client,
            gateway,
            session["id"],
            "Which enzyme catalyses carbon fixation in the Calvin cycle?",
            {**auth, "traceparent": traceparent},
        )
        assert got.status == 200, got.problem
        assert got.of("sources"), got.events
        server = await _server_span(exporter, trace_id)
        await _span_named(exporter, trace_id, "llm.generate")
        spans = exporter.get_finished_spans()
        tap.enabled = False

        exporter.clear()
        for path in UNTRACED_PATHS:
            await client.get(f"{gateway.url}{path}", headers={"traceparent": traceparent})
        # (the turn's own work may still end spans: its events go out through the outbox)
        probes = [
            s.name for s in exporter.get_finished_spans()
            if any(path in s.name for path in UNTRACED_PATHS)
        ]  # fmt: skip
        assert probes == [], "probes are not traced"

    # the gateway continued the caller's trace ...
    assert server.parent is not None and server.parent.is_remote
    assert server.parent.span_id == caller_span_id
    assert MESSAGES_ROUTE in server.name
    # ... and every request it made while answering carried it to the responder
    assert set(seen) == {
        Subjects.MEMORY_RECALL, Subjects.RETRIEVE, Subjects.INDEX_CHUNKS, Subjects.RERANK
    }  # fmt: skip
    for subject, (header, current) in seen.items():
        assert _traceparent_ids(header)[0] == trace_id, subject
        assert current == trace_id, subject
    # the responders' spans descend from the gateway's server span
    by_id = {span.context.span_id: span for span in spans}

    def ancestors(span: ReadableSpan) -> list[int]:
        found = []
        while span.parent is not None and span.parent.span_id in by_id:
            found.append(span.parent.span_id)
            span = by_id[span.parent.span_id]
        return found

    processed = {
        span.name.rsplit(" ", 1)[0]: span
        for span in spans
        if span.kind is SpanKind.CONSUMER and span.name.endswith(" process")
    }
    assert set(seen) <= set(processed), sorted(processed)
    for subject in seen:
        assert processed[subject].context.trace_id == trace_id, subject
        assert server.context.span_id in ancestors(processed[subject]), subject
    # the model call and the database queries are spans of the same tree
    (model,) = [s for s in spans if s.name == "llm.generate"]
    assert server.context.span_id in ancestors(model)
    assert model.attributes is not None and model.attributes["lectern.answered_by"] == "offline"
    queries = [
        s for s in spans if s.name.startswith("postgres ") and s.context.trace_id == trace_id
    ]
    operations = {s.name for s in queries}
    assert {"postgres INSERT", "postgres SELECT"} <= operations, operations
    assert all(server.context.span_id in ancestors(q) for q in queries)
    assert all(q.kind is SpanKind.CLIENT for q in [model, *queries])
