"""Every published event carries CloudEvents binary-mode headers, read back with the
CloudEvents SDK from a real JetStream message."""

from __future__ import annotations

import json
import uuid

import nats
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

from lectern_common.broker import create_broker, ensure_streams, publish_event, stream_for
from lectern_common.events import DocumentIndexed

pytestmark = pytest.mark.integration
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


async def test_a_published_event_is_a_cloudevent(nats_url: str, tenant_id: str) -> None:
    event = DocumentIndexed(
        tenant_id=tenant_id,
        document_id=uuid.uuid4(),
        version=1,
        page_count=2,
        chunk_count=3,
        duration_ms=10.0,
    )
    nc = await nats.connect(nats_url)
    await ensure_streams(nc.jetstream())
    await nc.close()
    broker = create_broker(nats_url, service_name="test")
    async with broker:
        await broker.start()
        await publish_event(broker, event, headers={"traceparent": TRACEPARENT})
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(event.subject, stream=stream_for(event.subject).name)
        found = None
        for _ in range(20):
            for msg in await sub.fetch(50, timeout=2):
                await msg.ack()
                if (msg.headers or {}).get("ce-id") == str(event.event_id):
                    found = msg
            if found is not None:
                break
        assert found is not None and found.headers is not None
        cloud = from_binary(HTTPMessage(headers=dict(found.headers), body=found.data), JSONFormat())
    finally:
        await nc.close()
    assert cloud.get_id() == str(event.event_id)
    assert cloud.get_type() == "lectern.documents.indexed.v1" == event.subject
    assert cloud.get_source() == f"/lectern/tenants/{tenant_id}"
    assert cloud.get_subject() == str(event.document_id)
    assert cloud.get_time() == event.occurred_at
    assert cloud.get_datacontenttype() == "application/json"
    data = cloud.get_data()
    body = data if isinstance(data, dict) else json.loads(data or b"{}")
    assert body["document_id"] == str(event.document_id)
    # the event's own headers still travel with it
    assert found.headers["Nats-Msg-Id"] == str(event.event_id)
    assert found.headers["traceparent"].startswith("00-")
