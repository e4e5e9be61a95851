"""``lectern_client.bus``: a subscriber reads Lectern's events from a real JetStream as
CloudEvents, through a durable consumer that resumes where it left off."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lectern_client.bus import BusEvent, from_message, subscribe
from lectern_common.broker import create_broker, ensure_streams, publish_event
from lectern_common.events import DocumentIndexed

pytestmark = pytest.mark.integration


def _indexed(tenant_id: str) -> DocumentIndexed:
    return DocumentIndexed(
        tenant_id=tenant_id, document_id=uuid.uuid4(), version=1, page_count=1,
        chunk_count=2, duration_ms=5.0,
    )  # fmt: skip


async def _next_of(events: AsyncIterator[BusEvent], wanted: set[str]) -> list[BusEvent]:
    """Events of ``wanted`` ids from the subscription, acknowledging every one read."""
    seen: list[BusEvent] = []
    async for event in events:
        await event.ack()
        if event.id in wanted:
            seen.append(event)
        if {e.id for e in seen} >= wanted:
            break
    return seen


async def test_a_subscriber_reads_events_as_cloudevents_and_resumes(
    nats_url: str, tenant_id: str, jetstream: Any
) -> None:
    await ensure_streams(jetstream)
    first, second = _indexed(tenant_id), _indexed(tenant_id)
    broker = create_broker(nats_url, service_name="test")
    durable = f"lms-{uuid.uuid4().hex[:8]}"
    async with broker:
        await broker.start()
        await publish_event(broker, first)
        events = subscribe(nats_url, "lectern.documents.indexed.v1", durable=durable, wait=1)
        (got,) = await _next_of(events, {str(first.event_id)})
        await events.aclose()
        assert got.type == "lectern.documents.indexed.v1"
        assert got.tenant_id == tenant_id and got.subject == str(first.document_id)
        assert got.time == first.occurred_at
        assert got.data["chunk_count"] == 2
        # a second subscriber of the same durable starts after what was acknowledged
        await publish_event(broker, second)
        again = subscribe(nats_url, "lectern.documents.indexed.v1", durable=durable, wait=1)
        later = await _next_of(again, {str(second.event_id)})
        await again.aclose()
    assert [e.id for e in later] == [str(second.event_id)]


async def _noop() -> None:
    return None


def test_a_message_without_cloudevents_headers_is_refused() -> None:
    from lectern_client.bus import NotACloudEvent

    with pytest.raises(NotACloudEvent, match="ce-id"):
        from_message({"Nats-Msg-Id": "x"}, b"{}", _noop, _noop)
    with pytest.raises(NotACloudEvent, match=r"0\.3"):
        from_message(
            {"ce-id": "1", "ce-type": "t", "ce-source": "/s", "ce-specversion": "0.3"},
            b"{}", _noop, _noop,
        )  # fmt: skip
