"""The gateway's one subscriber, the webhook dispatcher's consumer, in memory (FastStream's
``TestNatsBroker``) over the session's Postgres: an event a tenant's webhook asked for becomes
one pending delivery (a redelivery adds none) and wakes the delivery worker; an event it did
not ask for, or one that names no tenant, adds nothing and is still settled."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from faststream.nats import TestNatsBroker

from lectern_common.broker import create_broker, stream_for
from lectern_common.events import FeedbackFlagged, Subjects
from lectern_common.service import ServiceState
from lectern_gateway.config import Settings
from lectern_gateway.webhooks import dispatcher
from lectern_gateway.webhooks import repository as repo

pytestmark = pytest.mark.integration


async def test_an_asked_for_event_becomes_one_delivery_and_wakes_the_worker(
    db_pool: Any, tenant_id: str
) -> None:
    await repo.insert_webhook(
        db_pool, tenant_id=tenant_id, url="https://hooks.example.org/lectern",
        event_types=[Subjects.FEEDBACK_FLAGGED], description=None, secret="whsec_x",
        created_by="admin-1",
    )  # fmt: skip
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-gateway")
    state = ServiceState(settings=Settings(), broker=broker, pool=db_pool)
    woken: list[bool] = []
    dispatcher.subscribe(broker, state, lambda: woken.append(True))
    flagged = FeedbackFlagged(
        tenant_id=tenant_id, flag_id=uuid.uuid4(), message_id=uuid.uuid4(),
        session_id=uuid.uuid4(), user_id="stu", reason="unclear",
    )  # fmt: skip
    stream = stream_for(Subjects.FEEDBACK_FLAGGED).name
    async with TestNatsBroker(broker) as br:
        for _ in range(2):  # a redelivery adds no second delivery
            await br.publish(flagged.model_dump(mode="json"), flagged.subject, stream=stream)
        await br.publish({"no": "tenant"}, Subjects.FEEDBACK_FLAGGED, stream=stream)
    rows = await db_pool.fetch(
        "SELECT event_id, event_type FROM webhook_deliveries WHERE tenant_id = $1", tenant_id
    )
    assert [(r["event_id"], r["event_type"]) for r in rows] == [
        (flagged.event_id, Subjects.FEEDBACK_FLAGGED)
    ]
    assert woken == [True]
