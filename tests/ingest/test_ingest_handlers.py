"""Ingest's handlers in memory (FastStream's ``TestNatsBroker``): a typed ``documents.uploaded``
reaches the worker; a message that is no upload is parked on the dead-letter stream and
rejected, and the worker never sees it; confirmed curriculum standards reach the chunks ingest
owns (``lectern.chunks.curriculum.v1``)."""

import asyncio
import json
import uuid
from typing import Any, cast

import pytest
from faststream.nats import TestNatsBroker
from lectern_testing.chat import seed_document

from lectern_common.broker import create_broker, stream_for
from lectern_common.events import (
    ChunkCurriculumReply,
    ChunkCurriculumRequest,
    DocumentUploaded,
    MessageParked,
    SectionStandards,
    Subjects,
)
from lectern_ingest.app import subscribe
from lectern_ingest.config import Settings
from lectern_ingest.outcomes import Outcome
from lectern_ingest.service import IngestWorker

STREAM = stream_for(Subjects.DOCUMENTS_UPLOADED).name


class RecordingWorker:
    """Stands in for the worker: records the events it is given."""

    def __init__(self, settings: Settings, pool: Any = None) -> None:
        self.settings = settings
        self.pool = pool
        self.events: list[DocumentUploaded] = []

    async def process(self, *, event: DocumentUploaded, deliveries: int, keepalive: Any) -> Outcome:
        self.events.append(event)
        return Outcome("indexed")

    def retry_delay_for(self, deliveries: int) -> float:
        return 1.0


def uploaded(tenant_id: str) -> DocumentUploaded:
    return DocumentUploaded(
        tenant_id=tenant_id, document_id=uuid.uuid4(), version=1, object_name="o",
        filename="notes.txt", mime_type="text/plain", size_bytes=5, file_sha256="x",
        uploaded_by="teacher-1",
    )  # fmt: skip


async def test_on_uploaded_hands_the_typed_event_to_the_worker() -> None:
    settings = Settings(batch_documents=1)
    worker = RecordingWorker(settings)
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-ingest")
    subscribe(broker, settings=settings, worker=lambda: cast(IngestWorker, worker))
    event = uploaded("t1")
    async with TestNatsBroker(broker) as br:
        await br.publish(event.model_dump(mode="json"), Subjects.DOCUMENTS_UPLOADED, stream=STREAM)
        on_uploaded = next(
            s.calls[0].handler for s in broker.subscribers if s.calls[0].name == "on_uploaded"
        )
        on_uploaded.mock.assert_called_once_with(event.model_dump(mode="json"))
    assert worker.events == [event]


async def test_an_invalid_upload_is_parked_and_never_reaches_the_worker() -> None:
    settings = Settings(batch_documents=1)
    worker = RecordingWorker(settings)
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-ingest")
    subscribe(broker, settings=settings, worker=lambda: cast(IngestWorker, worker))
    parked: asyncio.Queue[MessageParked] = asyncio.Queue()

    @broker.subscriber(Subjects.DEAD_LETTER, stream=stream_for(Subjects.DEAD_LETTER))
    async def on_parked(event: MessageParked) -> None:
        await parked.put(event)

    body = {"tenant_id": "t1", "document_id": "not-a-uuid"}
    async with TestNatsBroker(broker) as br:
        await br.publish(body, Subjects.DOCUMENTS_UPLOADED, stream=STREAM)
        event = await asyncio.wait_for(parked.get(), 5)
    assert worker.events == []
    assert (event.tenant_id, event.original_subject) == ("t1", Subjects.DOCUMENTS_UPLOADED)
    assert (event.service, event.reason) == ("lectern-ingest", "invalid_message")
    assert "document_id" in event.detail
    assert json.loads(event.payload) == body


@pytest.mark.integration
async def test_curriculum_standards_reach_the_chunks(db_pool: Any, tenant_id: str) -> None:
    seeded = await seed_document(
        db_pool, tenant_id=tenant_id,
        chunks=[("Mitosis divides a cell.", ["1 Cells", "1.1 Mitosis"], []),
                ("Plants use light.", ["2 Plants"], [])],
    )  # fmt: skip
    settings = Settings(batch_documents=1)
    worker = RecordingWorker(settings, pool=db_pool)
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-ingest")
    subscribe(broker, settings=settings, worker=lambda: cast(IngestWorker, worker))
    tag = ChunkCurriculumRequest(
        tenant_id=tenant_id, document_id=seeded.document_id, document=["LS1"],
        sections=[SectionStandards(path=["1 Cells"], standards=["LS1-CELL"])],
    )  # fmt: skip
    async with TestNatsBroker(broker) as br:
        raw = await br.request(tag.model_dump(mode="json"), Subjects.CHUNKS_CURRICULUM, timeout=30)
        elsewhere = tag.model_copy(update={"tenant_id": f"{tenant_id}-b"})
        other = await br.request(
            elsewhere.model_dump(mode="json"), Subjects.CHUNKS_CURRICULUM, timeout=30
        )
    reply = ChunkCurriculumReply.model_validate_json(raw.body)
    assert (reply.error, reply.updated) == (None, 2)
    assert ChunkCurriculumReply.model_validate_json(other.body).updated == 0  # not its tenant's
    rows = await db_pool.fetch(
        "SELECT id, curriculum_standards FROM chunks WHERE document_id = $1",
        seeded.document_id,
    )
    tags = {r["id"]: sorted(r["curriculum_standards"]) for r in rows}
    assert [tags[i] for i in seeded.chunk_ids] == [["LS1", "LS1-CELL"], ["LS1"]]
