"""The review queue's consumer of ``documents.conflicts`` over the session's Postgres: in
memory (FastStream's ``TestNatsBroker``), the pairs ingest found are queued once, a
redelivered event adds no duplicate and leaves a resolved pair resolved, and a pair whose
chunk is gone meanwhile is dropped without spoiling the others; on a real nats-server with
NATS users, ingest's user publishes the event and the gateway's consumes it. The whole path
(ingest indexes two documents that disagree, the gateway worker queues them) is
``test_review.test_two_uploads_that_disagree_appear_side_by_side``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from faststream.nats import TestNatsBroker
from lectern_testing.chat import seed_document

from lectern_common.broker import create_broker, ensure_streams, publish_event, stream_for
from lectern_common.events import ConflictPair, ConflictsFound, Subjects, conflicts_found
from lectern_common.nats_auth import (
    SERVICE_PERMISSIONS,
    authorization_config,
    nats_user,
    new_credentials,
)
from lectern_common.runtime.nats import EmbeddedNats
from lectern_common.service import ServiceState
from lectern_gateway.config import Settings
from lectern_gateway.review import conflicts
from lectern_gateway.review import repository as repo

pytestmark = pytest.mark.integration

QUEUED = "SELECT * FROM source_conflicts WHERE tenant_id = $1"


async def _disagreement(pool: Any, tenant_id: str) -> ConflictPair:
    """Two seeded documents and the pair of their first chunks that disagree."""
    one = await seed_document(pool, tenant_id=tenant_id, title="Water, edition 1")
    two = await seed_document(pool, tenant_id=tenant_id, title="Water, edition 2")
    return ConflictPair(
        chunk_a=two.chunk_ids[0], chunk_b=one.chunk_ids[0], document_a=two.document_id,
        document_b=one.document_id, kind="number",
        statement_a="Water boils at 90 °C at sea level.",
        statement_b="Water boils at 100 °C at sea level.",
        detail="90 °C in one, 100 °C in the other", similarity=0.93,
    )  # fmt: skip


async def test_a_redelivered_event_adds_no_duplicate(
    db_pool: Any, tenant_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    pair = await _disagreement(db_pool, tenant_id)
    # re-indexed meanwhile: its chunk is gone, and with it anything to review
    gone = pair.model_copy(update={"chunk_a": uuid.uuid4(), "kind": "negation"})
    [event] = conflicts_found(tenant_id, [gone, pair])
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-gateway-worker")
    conflicts.subscribe(broker, ServiceState(settings=Settings(), broker=broker, pool=db_pool))
    stream = stream_for(Subjects.DOCUMENTS_CONFLICTS).name
    async with TestNatsBroker(broker) as br:
        for _ in range(2):  # a redelivery adds no second row
            await br.publish(event.model_dump(mode="json"), event.subject, stream=stream)
        [row] = await db_pool.fetch(QUEUED, tenant_id)
        assert (row["chunk_a"], row["chunk_b"], row["kind"], row["status"]) == (
            pair.chunk_a, pair.chunk_b, "number", "open",
        )  # fmt: skip
        assert row["detail"] == pair.detail and row["similarity"] == pytest.approx(0.93)
        await repo.resolve_conflict(
            pool=db_pool, conflict_id=row["id"], resolution="fixed", note=None, resolved_by="t-1"
        )
        await br.publish(event.model_dump(mode="json"), event.subject, stream=stream)
    [after] = await db_pool.fetch(QUEUED, tenant_id)
    assert (after["id"], after["status"], after["resolution"]) == (row["id"], "resolved", "fixed")
    # each delivery was settled, none refused and left for a retry
    assert not [r for r in caplog.records if "not queued" in r.getMessage()]
    assert await repo.add_conflicts(pool=db_pool, tenant_id=tenant_id, pairs=event.pairs) == 0


async def test_ingests_user_publishes_and_the_gateways_consumes_with_nats_users(
    tmp_path: Path, db_pool: Any, tenant_id: str
) -> None:
    """With NATS users on (the embedded stack, Kubernetes): ingest may publish the event, and
    the gateway's user creates the durable consumer and fetches from it."""
    [event] = conflicts_found(tenant_id, [await _disagreement(db_pool, tenant_id)])
    passwords = new_credentials(list(SERVICE_PERMISSIONS))
    server = EmbeddedNats(tmp_path / "nats", authorization=authorization_config(passwords))
    server.start()
    ingest, gateway = (
        create_broker(server.url, service_name=f"lectern-{service}",
                      credentials=(nats_user(service), passwords[nats_user(service)]))
        for service in ("ingest", "gateway")
    )  # fmt: skip
    conflicts.subscribe(gateway, ServiceState(settings=Settings(), broker=gateway, pool=db_pool))
    try:
        await ingest.start()
        await ensure_streams(ingest.config.connection_state.stream)
        await gateway.start()
        await publish_event(ingest, event)
        rows: list[Any] = []
        for _ in range(100):
            if rows := await db_pool.fetch(QUEUED, tenant_id):
                break
            await asyncio.sleep(0.1)
        assert [r["chunk_a"] for r in rows] == [event.pairs[0].chunk_a]
    finally:
        await gateway.stop()
        await ingest.stop()
        server.stop()


def test_the_same_findings_are_the_same_events() -> None:
    """Found again (a repeated check, in another order), the pairs make the same events, so
    the outbox stores them once; many pairs are split to stay under NATS's payload limit."""
    pairs = [
        ConflictPair(
            chunk_a=uuid.uuid4(),
            chunk_b=uuid.uuid4(),
            document_a=uuid.uuid4(),
            document_b=uuid.uuid4(),
            kind="negation",
            statement_a="It is so.",
            statement_b="It is not so.",
            detail="the second says it is not so",
            similarity=0.9,
        )
        for _ in range(120)
    ]
    events = conflicts_found("t", pairs)
    assert [len(e.pairs) for e in events] == [50, 50, 20]
    again = conflicts_found("t", list(reversed(pairs)))
    assert [e.event_id for e in again] == [e.event_id for e in events]
    assert {p.chunk_a for e in events for p in e.pairs} == {p.chunk_a for p in pairs}
    assert all(isinstance(e, ConflictsFound) for e in events)
    assert conflicts_found("t", []) == []
