"""Ingest keeps its own record of each upload (``ingest_documents``, issue 61): made from
``documents.uploaded``, brought to the gateway's changes by the state their events carry, in
whatever order they arrive; the gateway's ``documents`` row is never read or written."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from lectern_common.events import (
    DocumentArchived,
    DocumentDeleted,
    DocumentMetadata,
    DocumentRestored,
    DocumentState,
    DocumentUpdated,
    DocumentUploaded,
)
from lectern_ingest import lifecycle
from lectern_ingest import repository as repo

pytestmark = pytest.mark.integration


def _upload(tenant_id: str, **metadata: Any) -> DocumentUploaded:
    return DocumentUploaded(
        tenant_id=tenant_id, document_id=uuid.uuid4(), version=1, object_name="o",
        filename="waves.pdf", mime_type="application/pdf", size_bytes=10, file_sha256="x",
        uploaded_by="teacher-1", metadata=DocumentMetadata(**metadata),
        source={"url": "https://example.org/waves.pdf"},
    )  # fmt: skip


def _state(revision: int, status: str = "indexed", **values: Any) -> DocumentState:
    return DocumentState(revision=revision, status=status, title="Waves", **values)


async def _record(pool: Any, document_id: uuid.UUID) -> Any:
    return await pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", document_id)


@pytest.mark.parametrize(
    ("current", "wanted", "after"),
    [
        ("indexed", "archived", "archived"),
        ("archived", "indexed", "indexed"),
        ("superseded", "indexed", "indexed"),
        ("indexed", "superseded", "superseded"),
        ("processing", "indexed", "processing"),  # the gateway does not decide an outcome
        ("pending", "archived", "pending"),
        ("failed", "indexed", "failed"),
        ("duplicate", "archived", "duplicate"),
        ("pending", "deleted", "deleted"),
        ("deleted", "indexed", "deleted"),  # a deletion is final
    ],
)
def test_the_gateway_moves_only_a_document_ingest_indexed(
    current: str, wanted: str, after: str
) -> None:
    assert lifecycle.next_status(current, wanted) == after


async def test_an_upload_makes_the_record_once(db_pool: Any, tenant_id: str) -> None:
    event = _upload(tenant_id, title=None, subject="physics", topic_tags=["waves"])
    await repo.register_uploads(db_pool, [event])
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'indexed' WHERE id = $1", event.document_id
    )
    await repo.register_uploads(db_pool, [event])  # redelivered: nothing changes
    row = await _record(db_pool, event.document_id)
    assert (row["status"], row["title"], row["subject"], row["topic_tags"]) == (
        "indexed", "waves.pdf", "physics", ["waves"])  # fmt: skip
    assert row["metadata"]["source"] == {"url": "https://example.org/waves.pdf"}
    assert row["uploaded"] and row["object_name"] == "o"


async def test_states_apply_newest_first_whatever_the_order(db_pool: Any, tenant_id: str) -> None:
    """An archive (revision 1) delivered after the restore (revision 2) that undid it, and an
    edit (3) after a later one (4), leave the newest state: restored, with edit 4's subject."""
    event = _upload(tenant_id, subject="physics")
    await repo.register_uploads(db_pool, [event])
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'indexed' WHERE id = $1", event.document_id
    )
    ids: dict[str, Any] = {"tenant_id": tenant_id, "document_id": event.document_id}
    restored = DocumentRestored(**ids, restored_by="t", state=_state(2, subject="physics"))
    archived = DocumentArchived(**ids, archived_by="t", state=_state(1, "archived"))
    newer = DocumentUpdated(
        **ids, changes={"subject": ["physics", "music"]}, updated_by="t",
        state=_state(4, subject="music", freshness_date=dt.date(2026, 1, 5)),
    )  # fmt: skip
    older = DocumentUpdated(
        **ids, changes={"subject": ["physics", "art"]}, updated_by="t",
        state=_state(3, subject="art"),
    )  # fmt: skip
    for change in (restored, archived, newer, older, archived):
        await lifecycle.apply(db_pool, change)
    row = await _record(db_pool, event.document_id)
    assert (row["status"], row["subject"], row["revision"]) == ("indexed", "music", 4)
    assert row["freshness_date"] == dt.date(2026, 1, 5)


async def test_a_change_before_its_upload_is_kept(db_pool: Any, tenant_id: str) -> None:
    """A teacher renames a document before ingest has seen its upload: the record the change
    made keeps the new title; the upload adds what to fetch. A deletion before the upload
    leaves nothing to index."""
    event = _upload(tenant_id, subject="physics")
    renamed = DocumentUpdated(
        tenant_id=tenant_id, document_id=event.document_id,
        changes={"title": ["waves.pdf", "Waves"]}, updated_by="t",
        state=_state(1, "pending", subject="physics", topic_tags=["sound"]),
    )  # fmt: skip
    await lifecycle.apply(db_pool, renamed)
    assert not (await _record(db_pool, event.document_id))["uploaded"]
    await repo.register_uploads(db_pool, [event])
    row = await _record(db_pool, event.document_id)
    assert (row["status"], row["title"], row["topic_tags"], row["object_name"]) == (
        "pending", "Waves", ["sound"], "o")  # fmt: skip

    gone = _upload(tenant_id)
    await lifecycle.apply(
        db_pool,
        DocumentDeleted(tenant_id=tenant_id, document_id=gone.document_id, deleted_by="t"),
    )
    await repo.register_uploads(db_pool, [gone])
    assert (await _record(db_pool, gone.document_id))["status"] == "deleted"


async def test_an_event_from_an_older_gateway_still_applies(db_pool: Any, tenant_id: str) -> None:
    """Events without a state (published before this version) apply their changes."""
    event = _upload(tenant_id, subject="physics")
    await repo.register_uploads(db_pool, [event])
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'indexed' WHERE id = $1", event.document_id
    )
    ids: dict[str, Any] = {"tenant_id": tenant_id, "document_id": event.document_id}
    await lifecycle.apply(db_pool, DocumentArchived(**ids, archived_by="t"))
    assert (await _record(db_pool, event.document_id))["status"] == "archived"
    await lifecycle.apply(
        db_pool,
        DocumentUpdated(
            **ids, updated_by="t",
            changes={"subject": ["physics", "music"], "freshness_date": [None, "2026-02-01"]},
        ),
    )  # fmt: skip
    row = await _record(db_pool, event.document_id)
    assert (row["subject"], row["freshness_date"]) == ("music", dt.date(2026, 2, 1))
