"""The ingest worker over real NATS (JetStream + object store) and Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal, cast

import nats
import numpy as np
import pymupdf as _pymupdf
import pytest
from lectern_testing import hostile_files as hostile
from nats.js.errors import NotFoundError as NatsNotFoundError
from pydantic import SecretStr

from lectern_common import filetype
from lectern_common.broker import DOCUMENTS_BUCKET
from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_common.errors import RetryableError
from lectern_common.events import (
    ConflictsFound,
    DocumentFailed,
    DocumentIndexed,
    DocumentMetadata,
    DocumentProgress,
    DocumentUploaded,
    MessageParked,
    RetrievalFilters,
)
from lectern_common.index import FollowingEmbedder
from lectern_common.objects import object_name, password_object_name, put_bytes, put_password
from lectern_gateway.documents import repository as docs
from lectern_ingest import dedup
from lectern_ingest import repository as ingest_repo
from lectern_ingest import repository as repo
from lectern_ingest.app import create_app
from lectern_ingest.config import Settings
from lectern_ingest.service import IngestWorker
from lectern_retriever.repository import build_filter

#: PyMuPDF's partial annotations make mypy --strict reject plain calls
pymupdf: Any = _pymupdf

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARKDOWN = """# Forces

## Newton's first law

An object stays at rest or keeps moving in a straight line at constant speed unless a net
force acts on it. This property is called inertia.

## Newton's second law

The acceleration of an object equals the net force divided by its mass, F = m a. Doubling
the force doubles the acceleration.
"""


TOPICS = [
    ("Waves", "waves carry energy through a medium"),
    ("Light", "light is an electromagnetic wave"),
    ("Sound", "sound is a longitudinal pressure wave"),
    ("Optics", "lenses bend light by refraction"),
]


def pdf_bytes(pages: int, *, password: str | None = None) -> bytes:
    """A PDF with a chapter heading and a paragraph per page (optionally encrypted)."""
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        title, claim = TOPICS[(number - 1) % len(TOPICS)]
        page = doc.new_page()
        page.insert_text((72, 72), f"Chapter {number}: {title}", fontsize=22)
        body = " ".join(f"Point {i} of page {number}: {claim}." for i in range(12))
        page.insert_textbox(pymupdf.Rect(72, 110, 520, 700), body, fontsize=11)
    if password is None:
        data: bytes = doc.tobytes()
    else:
        data = doc.tobytes(
            encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=password, owner_pw=password + "-o"
        )
    doc.close()
    return data


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once for the module."""
    return LocalEmbedder(Settings())


@pytest.fixture(scope="module")
def settings(nats_url: str, database_url: str) -> Settings:
    """Worker settings pointing at the session's servers: every upload on the one-document
    path (its progress events included); small uploads in lists: test_service_batching."""
    return Settings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
        progress_interval_s=0.0, progress_after_s=0.0, retry_backoff_s=0.05, batch_documents=1,
    )  # fmt: skip


@pytest.fixture(scope="module")
async def app(settings: Settings, embedder: Embedder) -> AsyncIterator[Any]:
    """The ingest app with its durable consumer running."""
    application = create_app(settings, embedder=embedder)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
def worker(app: Any) -> IngestWorker:
    """The running app's worker (for deterministic direct deliveries)."""
    found = app.state.lectern.deps
    assert isinstance(found, IngestWorker)
    return found


@pytest.fixture(scope="module")
async def nc(nats_url: str) -> AsyncIterator[Any]:
    """A plain NATS connection for publishing and watching events."""
    connection = await nats.connect(nats_url)
    yield connection
    await connection.drain()


async def stage_upload(
    db_pool: Any,
    nc: Any,
    *,
    tenant_id: str,
    data: bytes,
    filename: str,
    mime: str,
    password: str | None = None,
    previous: uuid.UUID | None = None,
    version: int = 1,
    uploaded_by: str = "teacher-1",
    collection: Literal["educational", "assessment"] = "educational",
) -> DocumentUploaded:
    """What the gateway does for an upload: bytes (and password) in the object store, its row,
    and the event (which ingest makes its own record from)."""
    document_id = uuid.uuid4()
    name = object_name(document_id, version)
    await put_bytes(nc.jetstream(), name=name, data=data)
    if password is not None:
        await put_password(nc.jetstream(), name=name, password=password)
    metadata = DocumentMetadata(
        title=filename, subject="physics", grade_level=10, module_tag="m2", class_id="c1",
        content_type="notes", curriculum_standards=["HS-PS4-1"], topic_tags=["waves"],
        collection=collection, source_priority=0.7,
    )  # fmt: skip
    async with db_pool.acquire() as conn:
        await docs.insert_document(
            conn,
            docs.NewDocument(
                id=document_id, tenant_id=tenant_id, title=filename, filename=filename,
                mime_type=mime, size_bytes=len(data), file_sha256=uuid.uuid4().hex,
                subject="physics", grade_level=10, module_tag="m2", class_id="c1",
                content_type="notes", language=None, collection=collection,
                curriculum_standards=["HS-PS4-1"], topic_tags=["waves"], source_priority=0.7,
                freshness_date=None, version=version, previous_version_id=previous,
                object_name=name, uploaded_by=uploaded_by, uploader_role="teacher",
                metadata=metadata.model_dump(mode="json"),
            ),
        )  # fmt: skip
    return DocumentUploaded(
        tenant_id=tenant_id, document_id=document_id, version=version, object_name=name,
        filename=filename, mime_type=mime, size_bytes=len(data), file_sha256="x",
        uploaded_by=uploaded_by, metadata=metadata, has_password=password is not None,
        replaces_document_id=previous,
    )  # fmt: skip


async def object_exists(nc: Any, name: str) -> bool:
    """Whether the documents bucket holds ``name``."""
    store = await nc.jetstream().object_store(DOCUMENTS_BUCKET)
    try:
        await store.get_info(name)
    except NatsNotFoundError:
        return False
    return True


async def watch(nc: Any, subject: str, document_id: uuid.UUID) -> asyncio.Queue[dict[str, Any]]:
    """Queue of the events on ``subject`` about one document."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_message(msg: Any) -> None:
        data = json.loads(msg.data)
        if data.get("document_id") == str(document_id):
            await queue.put(data)

    await nc.subscribe(subject, cb=on_message)
    return queue


async def outboxed(pool: Any, subject: str, document_id: uuid.UUID) -> list[dict[str, Any]]:
    """The events about one document the worker wrote to the outbox (with its outcome)."""
    rows = await pool.fetch(
        "SELECT payload FROM outbox WHERE subject = $1 AND payload->>'document_id' = $2 "
        "ORDER BY created_at",
        subject,
        str(document_id),
    )
    return [dict(r["payload"]) for r in rows]


async def until_indexed(
    nc: Any, indexed: asyncio.Queue[dict[str, Any]], progress: asyncio.Queue[dict[str, Any]]
) -> dict[str, Any]:
    """The ``documents.indexed`` event, waited for while ingest makes progress: a test of what
    the consumer does, not of how fast a loaded machine does it. It fails after 60 s without
    a progress event (at most 300 s in all), saying what the consumer holds: a CI run
    (2026-12-04) waited out a flat 60 s once, and left no clue why."""
    seen = 0
    for _ in range(300 // 60):
        try:
            return await asyncio.wait_for(indexed.get(), 60)
        except TimeoutError:
            if progress.qsize() > seen:
                seen = progress.qsize()
                continue
            break
    js = nc.jetstream()
    stream = await js.stream_info("LECTERN_DOCUMENTS")
    consumers = [
        (c.name, c.num_pending, c.num_ack_pending, c.num_waiting, c.num_redelivered)
        for c in await js.consumers_info("LECTERN_DOCUMENTS")
    ]
    raise AssertionError(
        f"not indexed, {seen} progress events; uploads in the stream: {stream.state.messages}; "
        f"consumers (name, pending, ack pending, pulls waiting, redelivered): {consumers}"
    )


async def test_uploaded_pdf_is_indexed_through_the_consumer(
    app: Any, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(4), filename="waves.pdf",
        mime=filetype.PDF,
    )  # fmt: skip
    indexed = await watch(nc, DocumentIndexed.subject, event.document_id)
    progress = await watch(nc, DocumentProgress.subject, event.document_id)
    await nc.jetstream().publish(event.subject, event.model_dump_json().encode())
    done = DocumentIndexed.model_validate(await until_indexed(nc, indexed, progress))
    assert done.page_count == 4
    assert done.chunk_count >= 1
    assert done.language == "en"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert row["status"] == "indexed"
    assert row["content_sha256"] and row["simhash"] is not None
    assert row["enriched"] is False and row["enrichment_note"] == "no Gemini key"
    assert row["ts_config"] == "english"
    chunks = await db_pool.fetch(
        "SELECT * FROM chunks WHERE document_id = $1 ORDER BY chunk_index", event.document_id
    )
    assert len(chunks) == done.chunk_count
    assert sorted({c["page_start"] for c in chunks}) == [1, 2, 3, 4]
    second = next(c for c in chunks if c["page_start"] == 2)
    assert second["section_path"] == ["Chapter 2: Light"]
    assert {c["chapter"] for c in chunks} >= {"Chapter 1: Waves", "Chapter 4: Optics"}
    for chunk in chunks:
        assert chunk["subject"] == "physics" and chunk["grade_level"] == 10
        assert chunk["module_tag"] == "m2" and chunk["class_id"] == "c1"
        assert chunk["curriculum_standards"] == ["HS-PS4-1"]
        assert chunk["language"] == "en" and chunk["ts_config"] == "english"
        assert chunk["token_count"] <= 256
        assert chunk["embedding"].dimensions() == 384
    stages = []
    while not progress.empty():
        stages.append(DocumentProgress.model_validate(progress.get_nowait()))
    assert stages, "progress events are published while working"
    assert any(p.done == p.total == 4 and p.unit == "pages" for p in stages)


async def test_redelivery_does_not_duplicate_chunks(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="forces.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    indexed = await watch(nc, DocumentIndexed.subject, event.document_id)
    first = await worker.process(event=event, deliveries=1)
    assert first.status == "indexed"
    ids = {r["id"] for r in await db_pool.fetch(
        "SELECT id FROM chunks WHERE document_id = $1", event.document_id)}  # fmt: skip
    assert ids
    # a crash between commit and ack: the re-delivery touches nothing; the outcome is the
    # one the store committed to the outbox (the same id again: stored and published once)
    again = await worker.process(event=event, deliveries=2)
    assert again.status == "indexed"
    published = await asyncio.wait_for(indexed.get(), 10)
    assert published["chunk_count"] == len(ids)
    with contextlib.suppress(TimeoutError):
        duplicate = await asyncio.wait_for(indexed.get(), 1.0)
        assert duplicate["event_id"] == published["event_id"]
    outboxed_ = await outboxed(db_pool, DocumentIndexed.subject, event.document_id)
    assert [e["event_id"] for e in outboxed_] == [published["event_id"]]
    # a re-delivery racing a slow first attempt: same deterministic ids, no duplicates
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'processing' WHERE id = $1", event.document_id
    )
    third = await worker.process(event=event, deliveries=3)
    assert third.status == "indexed"
    after = {r["id"] for r in await db_pool.fetch(
        "SELECT id FROM chunks WHERE document_id = $1", event.document_id)}  # fmt: skip
    assert after == ids


@pytest.mark.parametrize(
    ("data", "mime", "stage", "reason"),
    [
        (pdf_bytes(2, password="s3cret"), filetype.PDF, "extract", "encrypted"),
        (b"", filetype.PDF, "extract", "empty_file"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 20, filetype.PDF, "extract", "corrupt"),
        (bytes(range(256)) * 4, "application/octet-stream", "extract", "unsupported_type"),
        (hostile.docx_bomb(), filetype.DOCX, "extract", "too_large"),
        (hostile.pptx_bomb(), filetype.PPTX, "extract", "too_large"),
        (hostile.epub_bomb(), filetype.EPUB, "extract", "too_large"),
        (hostile.docx_of_many_members(), filetype.DOCX, "extract", "too_large"),
        (hostile.pdf_claiming_pages(100_000), filetype.PDF, "extract", "corrupt"),
        (hostile.pdf_of_too_many_pages(), filetype.PDF, "extract", "too_large"),
        (b"PK\x03\x04" + bytes(range(256)) * 8, filetype.DOCX, "extract", "corrupt"),
    ],
    ids=[
        "encrypted",
        "empty",
        "corrupt",
        "unsupported",
        "docx-bomb",
        "pptx-bomb",
        "epub-bomb",
        "many-members",
        "claims-100000-pages",
        "too-many-pages",
        "zip-posing-as-docx",
    ],
)
async def test_permanent_failures_end_failed_without_chunks(
    worker: IngestWorker,
    nc: Any,
    db_pool: Any,
    tenant_id: str,
    data: bytes,
    mime: str,
    stage: str,
    reason: str,
) -> None:
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=data, filename="bad.pdf", mime=mime
    )
    failed = await watch(nc, DocumentFailed.subject, event.document_id)
    outcome = await worker.process(event=event, deliveries=1)
    assert outcome.status == "failed" and outcome.retry_after is None
    published = DocumentFailed.model_validate(await asyncio.wait_for(failed.get(), 5))
    assert (published.stage.value, published.reason.value) == (stage, reason)
    assert published.message
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert (row["status"], row["error_stage"], row["error_reason"]) == ("failed", stage, reason)
    count = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", event.document_id
    )
    assert count == 0


async def test_encrypted_pdf_opens_with_its_password(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(2, password="s3cret"),
        filename="locked.pdf", mime=filetype.PDF, password="s3cret",
    )  # fmt: skip
    assert event.has_password and "s3cret" not in event.model_dump_json()
    assert "pdf_password" not in event.model_dump(mode="json")
    assert await object_exists(nc, password_object_name(event.object_name))
    assert (await worker.process(event=event, deliveries=1)).status == "indexed"
    assert not await object_exists(nc, password_object_name(event.object_name)), (
        "the password is removed once the document is indexed"
    )
    assert await object_exists(nc, event.object_name)
    wrong = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(3, password="s3cret"),
        filename="locked2.pdf", mime=filetype.PDF, password="nope",
    )  # fmt: skip
    assert (await worker.process(event=wrong, deliveries=1)).status == "failed"
    reason = await db_pool.fetchval(
        "SELECT error_reason FROM ingest_documents WHERE id = $1", wrong.document_id
    )
    assert reason == "wrong_password"
    assert not await object_exists(nc, password_object_name(wrong.object_name))


async def test_password_in_an_old_gateways_event_still_works(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    staged = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(2, password="legacy"),
        filename="old.pdf", mime=filetype.PDF,
    )  # fmt: skip
    payload = staged.model_dump(mode="json") | {"pdf_password": "legacy"}
    del payload["has_password"]
    event = DocumentUploaded.model_validate(payload)
    assert (await worker.process(event=event, deliveries=1)).status == "indexed"


async def test_missing_password_object_fails_with_a_clear_message(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    staged = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(2, password="gone"),
        filename="gone.pdf", mime=filetype.PDF,
    )  # fmt: skip
    event = staged.model_copy(update={"has_password": True})
    assert (await worker.process(event=event, deliveries=1)).status == "failed"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert (row["error_stage"], row["error_reason"]) == ("fetch", "object_missing")
    assert "password" in row["error_message"]


async def test_bounded_deliveries_end_failed(
    worker: IngestWorker, settings: Settings, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="f.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    failed = await watch(nc, DocumentFailed.subject, event.document_id)
    # earlier deliveries crashed the worker: the record says processing, attempt 4 of 5
    await ingest_repo.register_uploads(db_pool, [event])
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'processing', attempts = $2 WHERE id = $1",
        event.document_id, settings.max_deliveries - 1,
    )  # fmt: skip
    outcome = await worker.process(event=event, deliveries=settings.max_deliveries)
    assert outcome.status == "failed" and outcome.retry_after is None
    published = DocumentFailed.model_validate(await asyncio.wait_for(failed.get(), 5))
    assert published.reason.value == "too_many_deliveries"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert (row["status"], row["error_reason"]) == ("failed", "too_many_deliveries")

    # the upload itself is what ingest keeps a record from: one the gateway's row never saw
    # (a gateway that crashed between publishing and committing cannot: the outbox) is
    # indexed all the same, once
    ghost = event.model_copy(update={"document_id": uuid.uuid4()})
    assert (await worker.process(event=ghost, deliveries=1)).status == "indexed"
    assert (await worker.process(event=ghost, deliveries=2)).status == "indexed"


async def test_deliveries_spent_before_any_attempt_do_not_fail_an_upload(
    worker: IngestWorker, settings: Settings, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """Ingest gives up after its own count of attempts that started, not JetStream's count of
    deliveries: a delivery can be spent with no attempt begun (a replica killed with the
    upload fetched, a delivery waiting in a queue past its ack wait), and a good upload whose
    first attempt comes on its sixth delivery is indexed. JetStream's own limit still ends
    one that no attempt ever finishes, with a reason."""
    assert settings.delivery_limit > settings.max_deliveries
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="late.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    outcome = await worker.process(event=event, deliveries=settings.max_deliveries + 1)
    assert outcome.status == "indexed"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert row["attempts"] == 1

    stuck = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="stuck.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    await ingest_repo.register_uploads(db_pool, [stuck])
    await db_pool.execute(
        "UPDATE ingest_documents SET status = 'processing', attempts = 1 WHERE id = $1",
        stuck.document_id,
    )  # fmt: skip
    outcome = await worker.process(event=stuck, deliveries=settings.delivery_limit)
    assert (outcome.status, outcome.gave_up) == ("failed", "too_many_deliveries")
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", stuck.document_id)
    assert (row["status"], row["error_reason"]) == ("failed", "too_many_deliveries")
    assert row["error_message"].startswith(f"delivered {settings.delivery_limit} times")


async def test_document_time_limit(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    state = app.state.lectern
    published: list[Any] = []

    async def publish(event: Any) -> None:
        published.append(event)

    impatient = IngestWorker(
        settings=settings.model_copy(update={"document_timeout_s": 0.05}),
        embedder=embedder, pool=state.pool, jetstream=nc.jetstream(), publish=publish,
    )  # fmt: skip
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(30), filename="long.pdf",
        mime=filetype.PDF,
    )  # fmt: skip
    outcome = await impatient.process(event=event, deliveries=1)
    assert outcome.status == "failed"
    failures = await outboxed(db_pool, DocumentFailed.subject, event.document_id)
    assert [f["reason"] for f in failures] == ["timeout"]
    assert not [e for e in published if isinstance(e, DocumentFailed)], "through the outbox"
    count = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", event.document_id
    )
    assert count == 0


async def test_a_timeout_inside_the_limit_is_tried_again_not_the_limit(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """A ``TimeoutError`` of a call inside (asyncpg's connect while Postgres is lost) is not
    the document's time limit: the upload is tried again, not failed ``timeout``."""
    state = app.state.lectern

    class TimesOutOnce:
        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

        async def embed_documents(self, texts: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                raise TimeoutError  # as asyncio.wait_for raises it
            return await embedder.embed_documents(texts)

    async def publish(event: Any) -> None:
        pass

    flaky = TimesOutOnce()
    worker = IngestWorker(
        settings=settings, embedder=cast("Embedder", flaky), pool=state.pool,
        jetstream=nc.jetstream(), publish=publish,
    )  # fmt: skip
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="t.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    first = await worker.process(event=event, deliveries=1)
    assert first.status == "retry", first
    assert await outboxed(db_pool, DocumentFailed.subject, event.document_id) == []
    assert (await worker.process(event=event, deliveries=2)).status == "indexed"


async def test_near_duplicate_is_flagged(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    original = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="a.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    assert (await worker.process(event=original, deliveries=1)).status == "indexed"
    tweaked = MARKDOWN.replace("constant speed", "a constant speed")
    copy = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=tweaked.encode(), filename="b.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    assert (await worker.process(event=copy, deliveries=1)).status == "indexed"
    row = await db_pool.fetchrow(
        "SELECT near_duplicate_of, near_duplicate_score FROM ingest_documents WHERE id = $1",
        copy.document_id,
    )
    assert row["near_duplicate_of"] == original.document_id
    assert row["near_duplicate_score"] > 0.85


WATER = [
    "# Water\n\nPure water boils at 100 °C at sea level, and freezes at 0 °C.",
    "# Revision\n\nAt sea level pure water boils at 90 °C, and it freezes at 0 °C.",
]


async def _index_disagreeing(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> list[uuid.UUID]:
    """Index two documents that disagree on water's boiling point; their ids, in order."""
    return [await stage_and_index(worker, nc, db_pool, tenant_id, text) for text in WATER]


async def test_the_conflict_check_finds_the_same_through_the_index_as_exactly(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, fresh_pool: Any, tenant_id: str
) -> None:
    """A small tenant's chunks are all compared; a large one's through the HNSW index: the
    same disagreement is found either way.

    On a database of its own: an approximate index's answer depends on everything in it, and
    twice (fresh make test and CI, 2026-12-04) the session's shared index, filled by every
    other test, did not give this tenant's pair back (the exact comparison had found it)."""
    worker = IngestWorker(
        settings=settings, embedder=embedder, pool=fresh_pool, jetstream=nc.jetstream(),
        publish=app.state.lectern.deps.publish,
    )  # fmt: skip
    await _index_disagreeing(worker, nc, fresh_pool, f"{tenant_id}-other")
    await stage_and_index(worker, nc, fresh_pool, f"{tenant_id}-other", MARKDOWN)
    older, newest = await _index_disagreeing(worker, nc, fresh_pool, tenant_id)
    for exact_below in (10_000, 0):  # every chunk compared, then through the index
        async with fresh_pool.acquire() as conn, conn.transaction():
            found = await repo.conflicting_pairs(
                conn, document_ids=[newest], neighbours=3, min_similarity=0.6,
                exact_below=exact_below,
            )  # fmt: skip
        assert list(found) == [tenant_id], (exact_below, found)
        [pair] = found[tenant_id]
        assert (pair.kind, pair.document_a, pair.document_b) == ("number", newest, older), pair
        assert pair.detail == "90 °C in one, 100 °C in the other"


async def stage_and_index(
    worker: IngestWorker, nc: Any, pool: Any, tenant: str, text: str
) -> uuid.UUID:
    """One Markdown upload of ``tenant``, indexed by ``worker``: its document's id."""
    event = await stage_upload(
        pool, nc, tenant_id=tenant, data=text.encode(), filename="notes.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    outcome = await worker.process(event=event, deliveries=1)
    assert outcome.status == "indexed", outcome
    return event.document_id


async def test_conflicts_found_go_to_the_review_queue_through_the_outbox(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """Ingest only detects: the pairs leave as ``documents.conflicts``, written to its outbox
    (the gateway owns the queue); found again, they are the same event, stored once."""
    older, newest = await _index_disagreeing(worker, nc, db_pool, tenant_id)
    await worker.find_conflicts(newest)  # a repeated check announces nothing new
    rows = await db_pool.fetch(
        "SELECT payload FROM outbox WHERE subject = $1 AND payload->>'tenant_id' = $2",
        ConflictsFound.subject, tenant_id,
    )  # fmt: skip
    [event] = [ConflictsFound.model_validate(dict(r["payload"])) for r in rows]
    [pair] = event.pairs
    assert (pair.document_a, pair.document_b, pair.kind) == (newest, older, "number")
    assert "90 °C" in pair.statement_a and "100 °C" in pair.statement_b
    assert 0.6 <= pair.similarity <= 1.0


async def test_gemini_enrichment_adds_prefixes_and_linked_qa(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    from lectern_testing.gemini_fake import FakeGemini

    answer = {
        "prefixes": ["From a physics unit on forces: Newton's laws of motion."],
        "qa": [
            {"question": "What is inertia?", "answer": "Resistance to changes of motion.",
             "passage": 0},
            {"question": "State F = m a.", "answer": "Force equals mass times acceleration.",
             "passage": 0},
        ],
    }  # fmt: skip
    published: list[Any] = []

    async def publish(event: Any) -> None:
        published.append(event)

    with FakeGemini(default_text=json.dumps(answer)) as fake:
        enriching = settings.model_copy(
            update={"gemini_api_key": SecretStr("test-key"), "gemini_base_url": fake.base_url}
        )
        gemini_worker = IngestWorker(
            settings=enriching, embedder=embedder, pool=app.state.lectern.pool,
            jetstream=nc.jetstream(), publish=publish,
        )  # fmt: skip
        event = await stage_upload(
            db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="forces.md",
            mime=filetype.MARKDOWN,
        )  # fmt: skip
        assert (await gemini_worker.process(event=event, deliveries=1)).status == "indexed"
        assert fake.requests_to("generate"), "Gemini was asked"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", event.document_id)
    assert row["enriched"] is True and row["qa_count"] >= 2
    chunks = await db_pool.fetch(
        "SELECT id, kind, parent_chunk_id, context_prefix, text FROM chunks WHERE document_id = $1",
        event.document_id,
    )
    texts = {c["id"]: c for c in chunks if c["kind"] == "text"}
    qa = [c for c in chunks if c["kind"] == "qa"]
    assert len(qa) == row["qa_count"] and len(texts) == row["chunk_count"]
    assert all(c["parent_chunk_id"] in texts for c in qa)
    assert any(c["text"].startswith("Q: What is inertia?") for c in qa)
    # the model's context follows the chunk's place in the document (title > sections)
    assert any(
        (c["context_prefix"] or "").startswith("Forces > Newton's")
        and "From a physics unit" in (c["context_prefix"] or "")
        for c in texts.values()
    )


#: the same lesson exported again: other line breaks and spacing, the same words
REEXPORTED = MARKDOWN.replace("force acts on it.", "force\nacts   on it.").replace("\n\n", "\n\n\n")


async def test_same_cleaned_text_is_a_duplicate_not_a_second_index(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    assert REEXPORTED != MARKDOWN
    original = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="forces.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    assert (await worker.process(event=original, deliveries=1)).status == "indexed"
    indexed_chunks = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", original.document_id
    )
    copy = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=REEXPORTED.encode(), filename="forces-v2.md",
        mime=filetype.MARKDOWN, uploaded_by="teacher-2",
    )  # fmt: skip
    outcomes = await watch(nc, DocumentIndexed.subject, copy.document_id)
    assert (await worker.process(event=copy, deliveries=1)).status == "duplicate"
    published = DocumentIndexed.model_validate(await asyncio.wait_for(outcomes.get(), 5))
    assert published.duplicate_of == original.document_id and published.chunk_count == 0
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", copy.document_id)
    assert (row["status"], row["duplicate_of"], row["chunk_count"]) == (
        "duplicate", original.document_id, 0)  # fmt: skip
    assert row["content_sha256"] == await db_pool.fetchval(
        "SELECT content_sha256 FROM ingest_documents WHERE id = $1", original.document_id
    )
    chunks = await db_pool.fetch(
        "SELECT document_id, count(*) AS n FROM chunks WHERE tenant_id = $1 GROUP BY 1", tenant_id
    )
    assert {(r["document_id"], r["n"]) for r in chunks} == {
        (original.document_id, indexed_chunks)}  # fmt: skip
    # the gateway, applying the outcome to its rows, makes the uploader a co-owner
    async with db_pool.acquire() as conn:
        assert await docs.apply_indexed(conn, published)
    owners = await db_pool.fetchval(
        "SELECT co_owners FROM documents WHERE id = $1", original.document_id
    )
    assert owners == ["teacher-2"], "the duplicate's uploader co-owns the original"
    status = await db_pool.fetchval("SELECT status FROM documents WHERE id = $1", copy.document_id)
    assert status == "duplicate"
    assert not await object_exists(nc, copy.object_name), "a duplicate keeps no bytes"

    # re-delivery changes nothing: the outcome stays the one event in the outbox
    assert (await worker.process(event=copy, deliveries=2)).status == "duplicate"
    outboxed_ = await outboxed(db_pool, DocumentIndexed.subject, copy.document_id)
    assert [e["event_id"] for e in outboxed_] == [str(published.event_id)]

    # the same text in the assessment collection is indexed: students must not reach it
    # through the educational copy, nor the other way round
    exam = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=REEXPORTED.encode(), filename="exam.md",
        mime=filetype.MARKDOWN, collection="assessment",
    )  # fmt: skip
    assert (await worker.process(event=exam, deliveries=1)).status == "indexed"
    # and another tenant's identical text is none of this tenant's business
    other = await stage_upload(
        db_pool, nc, tenant_id=f"{tenant_id}-b", data=MARKDOWN.encode(), filename="f.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    assert (await worker.process(event=other, deliveries=1)).status == "indexed"


async def test_store_rechecks_the_text_under_its_lock(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """Two copies read at the same time: the one stored second becomes the duplicate."""
    original = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=MARKDOWN.encode(), filename="a.md",
        mime=filetype.MARKDOWN,
    )  # fmt: skip
    assert (await worker.process(event=original, deliveries=1)).status == "indexed"
    late = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=REEXPORTED.encode(), filename="b.md",
        mime=filetype.MARKDOWN, uploaded_by="teacher-3",
    )  # fmt: skip
    # what the late copy's worker holds after embedding, having found no duplicate earlier
    result = ingest_repo.IndexedDocument(
        page_count=None, skipped_pages=0, chunk_count=1, qa_count=0, language="en",
        ts_config="english", content_sha256=dedup.sha256_text(REEXPORTED), simhash=0,
        near_duplicate_of=None, near_duplicate_score=None, enriched=False,
        enrichment_note=None,
    )  # fmt: skip
    chunk = ingest_repo.ChunkRecord(
        id=uuid.uuid4(), chunk_index=0, kind="text", parent_chunk_id=None, text="x",
        context_prefix=None, section_path=[], chapter=None, page_start=None, page_end=None,
        slide=None, time_start=None, time_end=None, token_count=1, content_hash="x",
    )  # fmt: skip
    async with db_pool.acquire() as conn:
        await ingest_repo.register_uploads(conn, [late])
        row = await ingest_repo.get_document(conn, late.document_id)
        stored = await ingest_repo.store_document(
            conn, document=row, chunks=[chunk], embeddings=np.zeros((1, 384), np.float32),
            result=result,
        )  # fmt: skip
    assert stored == "duplicate"
    row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", late.document_id)
    assert (row["status"], row["duplicate_of"]) == ("duplicate", original.document_id)
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM chunks WHERE document_id = $1", late.document_id
        )
        == 0
    )


async def test_new_version_swaps_atomically_and_drops_the_old_one(
    worker: IngestWorker, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    v1 = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(3), filename="waves.pdf",
        mime=filetype.PDF,
    )  # fmt: skip
    assert (await worker.process(event=v1, deliveries=1)).status == "indexed"
    v2 = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(6), filename="waves.pdf",
        mime=filetype.PDF, previous=v1.document_id, version=2,
    )  # fmt: skip

    # what retrieval can see, sampled without pause while the new version is indexed
    visible = build_filter(tenant_id=tenant_id, filters=RetrievalFilters())
    query = f"SELECT DISTINCT c.document_id FROM chunks c WHERE {visible.clause}"  # noqa: S608
    seen: list[frozenset[uuid.UUID]] = []
    done = asyncio.Event()

    async def sample() -> None:
        async with db_pool.acquire() as conn:
            while not done.is_set():
                rows = await conn.fetch(query, *visible.params)
                seen.append(frozenset(r["document_id"] for r in rows))
                await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    try:
        assert (await worker.process(event=v2, deliveries=1)).status == "indexed"
    finally:
        done.set()
        await sampler
    old, new = frozenset({v1.document_id}), frozenset({v2.document_id})
    assert set(seen) <= {old, new}, "never both versions, never neither"
    assert seen[0] == old and seen[-1] == new and len(seen) > 2
    left = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", v1.document_id
    )
    assert left == 0, "the superseded version's chunks are deleted, not just deactivated"
    status = await db_pool.fetchval(
        "SELECT status FROM ingest_documents WHERE id = $1", v1.document_id
    )
    assert status == "superseded"
    assert not await object_exists(nc, v1.object_name), "the old version's bytes are removed"
    assert await object_exists(nc, v2.object_name)


async def test_an_unbounded_token_is_cut_and_a_huge_document_fails_early(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """A 1-million-character "word" must not become one chunk counted as 3 tokens (the
    retriever's reply would then exceed NATS's payload limit), and a document making more
    chunks than the limit fails as soon as it does, with a reason, and stores nothing."""
    state = app.state.lectern
    published: list[Any] = []

    async def publish(event: Any) -> None:
        published.append(event)

    worker = IngestWorker(
        settings=settings.model_copy(update={"max_chunks_per_document": 50}),
        embedder=embedder, pool=state.pool, jetstream=nc.jetstream(), publish=publish,
    )  # fmt: skip
    token = ("Photosynthesis makes sugar. " * 20 + "q" * 9_000).encode()
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=token, filename="token.txt", mime=filetype.TEXT
    )
    assert (await worker.process(event=event, deliveries=1)).status == "indexed"
    rows = await db_pool.fetch(
        "SELECT text, token_count FROM chunks WHERE document_id = $1", event.document_id
    )
    assert len(rows) > 1
    limit = worker.chunking.max_tokens
    for row in rows:
        assert row["token_count"] <= limit
        assert embedder.count_tokens(row["text"]) <= limit
        assert len(row["text"]) < 40 * limit  # bounded by tokens, never by luck

    huge = ("Mitosis makes two cells. " * 2_000).encode()  # ~150 chunks of text
    event = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=huge, filename="huge.txt", mime=filetype.TEXT
    )
    assert (await worker.process(event=event, deliveries=1)).status == "failed"
    failures = await outboxed(db_pool, DocumentFailed.subject, event.document_id)
    assert [(f["stage"], f["reason"]) for f in failures] == [("chunk", "too_large")]
    assert "more than 50 chunks" in failures[0]["message"]
    count = await db_pool.fetchval(
        "SELECT count(*) FROM chunks WHERE document_id = $1", event.document_id
    )
    assert count == 0


async def test_the_consumer_takes_this_releases_ack_wait(
    app: Any, nc: Any, settings: Settings, embedder: Embedder
) -> None:
    """A consumer left by an earlier release (ack wait 120 s) is brought to the configured
    one, so a killed worker's document is redelivered after 30 s, not 120 s."""
    from nats.js.api import ConsumerConfig

    from lectern_common.broker import INGEST_DURABLE, stream_for
    from lectern_common.events import Subjects

    js = nc.jetstream()
    stream = stream_for(Subjects.DOCUMENTS_UPLOADED).name
    old = (await js.consumer_info(stream, INGEST_DURABLE)).config
    assert old.ack_wait == settings.ack_wait_s == 30.0
    await js.add_consumer(stream, config=ConsumerConfig(**{**old.as_dict(), "ack_wait": 120.0}))
    assert (await js.consumer_info(stream, INGEST_DURABLE)).config.ack_wait == 120.0
    second = create_app(settings, embedder=embedder)
    async with second.router.lifespan_context(second):
        info = await js.consumer_info(stream, INGEST_DURABLE)
    assert info.config.ack_wait == settings.ack_wait_s
    assert info.config.max_deliver == settings.delivery_limit


async def test_poison_messages_are_parked_for_an_operator(
    app: Any, settings: Settings, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    """A message the worker cannot read, and one that exhausts its deliveries, are copied to
    the dead-letter stream (reason, stream sequence, payload) instead of vanishing, and the
    worker goes on indexing."""
    parked: asyncio.Queue[MessageParked] = asyncio.Queue()

    async def on_parked(msg: Any) -> None:
        event = MessageParked.model_validate_json(msg.data)
        if event.tenant_id == tenant_id:
            await parked.put(event)

    subscription = await nc.subscribe(MessageParked.subject, cb=on_parked)
    worker: IngestWorker = app.state.lectern.deps
    healthy = worker.embedder

    class FailsOnPoison:
        def __getattr__(self, name: str) -> Any:
            return getattr(healthy, name)

        async def embed_documents(self, texts: Any) -> Any:
            if any("POISONED" in t for t in texts):
                raise RetryableError("the embedding service is away")
            return await healthy.embed_documents(texts)

    worker.embedder = cast("FollowingEmbedder", FailsOnPoison())
    try:
        js = nc.jetstream()
        garbage = json.dumps({"tenant_id": tenant_id, "document_id": "not-a-uuid"}).encode()
        ack = await js.publish(DocumentUploaded.subject, garbage)
        invalid = await asyncio.wait_for(parked.get(), 30)
        assert invalid.reason == "invalid_message"
        assert (invalid.stream, invalid.stream_sequence) == (ack.stream, ack.seq)
        assert invalid.original_subject == DocumentUploaded.subject
        assert invalid.payload == garbage.decode() and "document_id" in invalid.detail
        assert invalid.service == settings.service_name

        # an upload whose every attempt meets a transient fault (its embedding fails):
        # retried, then given up on and parked
        orphan = await stage_upload(
            db_pool, nc, tenant_id=tenant_id, data=b"# Poison\n\nA POISONED lesson.",
            filename="poison.md", mime=filetype.MARKDOWN,
        )  # fmt: skip
        await js.publish(orphan.subject, orphan.model_dump_json().encode())
        exhausted = await asyncio.wait_for(parked.get(), 60)
        assert exhausted.reason == "too_many_deliveries"
        # given up on the delivery before the last, so that its failure is recorded
        assert exhausted.deliveries == settings.max_deliveries - 1
        assert str(orphan.document_id) in exhausted.payload

        # the worker is still taking uploads
        event = await stage_upload(
            db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(1), filename="ok.pdf",
            mime=filetype.PDF,
        )  # fmt: skip
        indexed = await watch(nc, DocumentIndexed.subject, event.document_id)
        await js.publish(event.subject, event.model_dump_json().encode())
        await asyncio.wait_for(indexed.get(), 60)
        stored = await js.stream_info("LECTERN_DEADLETTER")
        assert stored.state.messages >= 2
    finally:
        worker.embedder = healthy
        await subscription.unsubscribe()


class CountingEmbedder:
    """The module's MiniLM, counting the passages it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.max_input_tokens = inner.max_input_tokens
        self.embedded = 0

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def embed_documents(self, texts: Any) -> Any:
        self.embedded += len(texts)
        return await self.inner.embed_documents(texts)

    async def embed_queries(self, texts: Any) -> Any:
        return await self.inner.embed_queries(texts)

    async def embed_query(self, text: str) -> Any:
        return await self.inner.embed_query(text)


async def test_a_new_version_reuses_the_embeddings_of_unchanged_chunks(
    app: Any, settings: Settings, embedder: Embedder, nc: Any, db_pool: Any, tenant_id: str
) -> None:
    counting = CountingEmbedder(embedder)
    worker = IngestWorker(
        settings=settings, embedder=counting, pool=db_pool, jetstream=nc.jetstream(),
        publish=app.state.lectern.deps.publish,
    )  # fmt: skip
    v1 = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(6), filename="waves.pdf",
        mime=filetype.PDF,
    )  # fmt: skip
    assert (await worker.process(event=v1, deliveries=1)).status == "indexed"
    first = counting.embedded
    before = {
        r["text"]: r["embedding"].to_list()
        for r in await db_pool.fetch(
            "SELECT text, embedding FROM chunks WHERE document_id = $1", v1.document_id
        )
    }
    # the same six pages and two more: the first six pages' chunks are not embedded again
    v2 = await stage_upload(
        db_pool, nc, tenant_id=tenant_id, data=pdf_bytes(8), filename="waves.pdf",
        mime=filetype.PDF, previous=v1.document_id, version=2,
    )  # fmt: skip
    assert (await worker.process(event=v2, deliveries=1)).status == "indexed"
    rows = await db_pool.fetch(
        "SELECT text, embedding FROM chunks WHERE document_id = $1", v2.document_id
    )
    kept = [r for r in rows if r["text"] in before]
    assert kept and len(kept) < len(rows)
    assert all(r["embedding"].to_list() == before[r["text"]] for r in kept)
    assert counting.embedded - first == len(rows) - len(kept)
