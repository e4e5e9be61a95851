"""Ingest's outcomes reach the gateway's ``documents`` as events (issue 61): the gateway's
consumers of ``documents.indexed`` / ``documents.failed`` write them to its rows, once,
marking the version replaced superseded and a duplicate's uploaders co-owners."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from lectern_testing.chat import Gateway, offline_gateway

from lectern_common.events import (
    DocumentFailed,
    DocumentIndexed,
    DocumentProgress,
    FailureReason,
    IngestStage,
)
from lectern_gateway.documents import outcomes
from lectern_gateway.documents import repository as docs

pytestmark = pytest.mark.integration


async def _row(
    pool: Any, tenant_id: str, *, uploaded_by: str = "teacher-1",
    previous: uuid.UUID | None = None, title: str = "lesson.pdf",
) -> uuid.UUID:  # fmt: skip
    document_id = uuid.uuid4()
    async with pool.acquire() as conn:
        await docs.insert_document(
            conn,
            docs.NewDocument(
                id=document_id, tenant_id=tenant_id, title=title, filename="lesson.pdf",
                mime_type="application/pdf", size_bytes=10, file_sha256=uuid.uuid4().hex,
                subject="physics", grade_level=None, module_tag=None, class_id=None,
                content_type=None, language=None, collection="educational",
                curriculum_standards=[], topic_tags=[], source_priority=0.7,
                freshness_date=None, version=2 if previous else 1,
                previous_version_id=previous, object_name=f"o-{document_id}",
                uploaded_by=uploaded_by, uploader_role="teacher", metadata={},
            ),
        )  # fmt: skip
    return document_id


def _indexed(tenant_id: str, document_id: uuid.UUID, **fields: Any) -> DocumentIndexed:
    values: dict[str, Any] = {
        "page_count": 3, "chunk_count": 7, "qa_count": 0, "duration_ms": 12.0,
        "language": "en", "ts_config": "english", "content_sha256": "c" * 64, "simhash": 42,
        "title": "Waves and Sound",
    }  # fmt: skip
    values.update(fields)
    return DocumentIndexed(tenant_id=tenant_id, document_id=document_id, version=1, **values)


async def _get(pool: Any, document_id: uuid.UUID) -> Any:
    return await pool.fetchrow("SELECT * FROM documents WHERE id = $1", document_id)


async def test_an_indexed_version_supersedes_the_one_it_replaces(
    db_pool: Any, tenant_id: str
) -> None:
    old = await _row(db_pool, tenant_id)
    assert await outcomes.apply(db_pool, _indexed(tenant_id, old))
    new = await _row(db_pool, tenant_id, previous=old)
    event = _indexed(tenant_id, new, chunk_count=9)
    assert await outcomes.apply(db_pool, event)
    assert not await outcomes.apply(db_pool, event), "a repeated outcome changes nothing"
    row, before = await _get(db_pool, new), await _get(db_pool, old)
    assert (row["status"], row["chunk_count"], row["page_count"], row["simhash"]) == (
        "indexed", 9, 3, 42)  # fmt: skip
    assert str(row["ts_config"]) == "english" and row["indexed_at"] is not None
    assert row["title"] == "Waves and Sound", "the document's own title replaces the file name"
    assert (before["status"], before["chunk_count"]) == ("superseded", 0)


async def test_a_title_a_teacher_changed_is_kept(db_pool: Any, tenant_id: str) -> None:
    document_id = await _row(db_pool, tenant_id)
    async with db_pool.acquire() as conn:
        await docs.update_metadata(conn, document_id, {"title": "My waves"})
        await docs.next_revision(conn, document_id)
    assert await outcomes.apply(db_pool, _indexed(tenant_id, document_id))
    assert (await _get(db_pool, document_id))["title"] == "My waves"


async def test_a_duplicate_makes_its_uploaders_co_owners(db_pool: Any, tenant_id: str) -> None:
    original = await _row(db_pool, tenant_id)
    assert await outcomes.apply(db_pool, _indexed(tenant_id, original))
    copy = await _row(db_pool, tenant_id, uploaded_by="teacher-2")
    again = await _row(db_pool, tenant_id, uploaded_by="teacher-2")
    for document_id in (copy, again):
        event = _indexed(tenant_id, document_id, chunk_count=0, duplicate_of=original)
        assert await outcomes.apply(db_pool, event)
    row = await _get(db_pool, copy)
    assert (row["status"], row["duplicate_of"]) == ("duplicate", original)
    assert (await _get(db_pool, original))["co_owners"] == ["teacher-2"], "added once"


async def test_a_failure_is_recorded_and_a_deleted_document_stays_deleted(
    db_pool: Any, tenant_id: str
) -> None:
    failed = await _row(db_pool, tenant_id)
    event = DocumentFailed(
        tenant_id=tenant_id, document_id=failed, stage=IngestStage.EXTRACT,
        reason=FailureReason.ENCRYPTED, message="give the PDF's password", attempts=2,
    )  # fmt: skip
    assert await outcomes.apply(db_pool, event)
    row = await _get(db_pool, failed)
    assert (row["status"], row["error_stage"], row["error_reason"], row["attempts"]) == (
        "failed", "extract", "encrypted", 2)  # fmt: skip
    assert not await outcomes.apply(db_pool, _indexed(tenant_id, failed)), "an outcome is final"

    deleted = await _row(db_pool, tenant_id)
    async with db_pool.acquire() as conn:
        await docs.mark_deleted(conn, document_id=deleted, deleted_by="teacher-1")
    assert not await outcomes.apply(db_pool, _indexed(tenant_id, deleted))
    assert (await _get(db_pool, deleted))["status"] == "deleted"


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool) as running:
        yield running


async def test_the_gateway_consumes_the_outcomes_from_jetstream(
    gateway: Gateway, nats_url: str, db_pool: Any, tenant_id: str
) -> None:
    """Published as ingest publishes them (JetStream, through its outbox relay), the
    outcomes and progress reach the rows through the gateway's durable consumers."""
    indexed, failed = await _row(db_pool, tenant_id), await _row(db_pool, tenant_id)
    working = await _row(db_pool, tenant_id)
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        progress = DocumentProgress(
            tenant_id=tenant_id, document_id=working, stage=IngestStage.EMBED, done=3, total=9
        )
        await js.publish(DocumentProgress.subject, progress.model_dump_json().encode())
        await js.publish(
            DocumentIndexed.subject, _indexed(tenant_id, indexed).model_dump_json().encode()
        )
        await js.publish(
            DocumentFailed.subject,
            DocumentFailed(
                tenant_id=tenant_id, document_id=failed, stage=IngestStage.FETCH,
                reason=FailureReason.OBJECT_MISSING, message="upload it again",
            ).model_dump_json().encode(),
        )  # fmt: skip
    finally:
        await nc.close()
    expected = ["indexed", "failed", "processing"]
    for _ in range(100):
        statuses = [(await _get(db_pool, d))["status"] for d in (indexed, failed, working)]
        if statuses == expected:
            break
        await asyncio.sleep(0.1)
    assert statuses == expected
    # progress reported after the outcome (a redelivery) changes nothing
    late = DocumentProgress(
        tenant_id=tenant_id, document_id=indexed, stage=IngestStage.STORE, done=1, total=1
    )
    assert not await outcomes.apply(db_pool, late)
    assert (await _get(db_pool, indexed))["status"] == "indexed"
