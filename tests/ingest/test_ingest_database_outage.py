"""Postgres going away under the ingest worker in the middle of a document (through a TCP
proxy in front of the real Postgres): the upload is not lost or left `processing`; once
Postgres is back it is redelivered and indexed exactly once, and the worker keeps going."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import nats
import pymupdf as _pymupdf
import pytest
from lectern_testing.pgproxy import PostgresProxy

from lectern_common import filetype, objects
from lectern_common.db.pool import create_pool
from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_common.events import DocumentIndexed, DocumentMetadata, DocumentUploaded
from lectern_common.filetype import PDF
from lectern_gateway.documents import repository as docs
from lectern_ingest.app import create_app
from lectern_ingest.config import Settings
from lectern_ingest.service import IngestWorker
from tests.ingest.test_service_worker import outboxed, stage_upload

pytestmark = pytest.mark.integration
pymupdf: Any = _pymupdf  # PyMuPDF is only partly typed


def lesson_pdf(pages: int) -> bytes:
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 60), f"Chapter {number}: Waves and energy", fontsize=16)
        text = " ".join(
            f"Waves carry energy through a medium in lesson {number}." for _ in range(30)
        )
        page.insert_textbox(pymupdf.Rect(60, 80, 540, 780), text, fontsize=10)
    data: bytes = doc.tobytes()
    doc.close()
    return data


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once for the module."""
    return LocalEmbedder(Settings())


@pytest.fixture
async def app(
    nats_url: str, postgres_proxy: tuple[PostgresProxy, str], embedder: Embedder
) -> AsyncIterator[Any]:
    settings = Settings(
        nats_url=nats_url, database_url=postgres_proxy[1], http_port=0, log_json=False,
        progress_interval_s=0.0, progress_after_s=0.0, retry_backoff_s=0.5,
        db_connect_timeout_s=1.0, db_command_timeout_s=3.0, batch_documents=1,
    )  # fmt: skip
    application = create_app(settings, embedder=embedder)
    async with application.router.lifespan_context(application):
        yield application


async def test_postgres_lost_while_storing_redelivers_and_indexes_once(
    app: Any, postgres_proxy: tuple[PostgresProxy, str], nats_url: str, db_pool: Any, tenant_id: str
) -> None:
    pg, _ = postgres_proxy
    nc = await nats.connect(nats_url)
    try:
        data = lesson_pdf(12)
        document_id = uuid.uuid4()
        name = objects.object_name(document_id, 1)
        await objects.put_bytes(nc.jetstream(), name=name, data=data)
        async with db_pool.acquire() as conn:
            await docs.insert_document(
                conn,
                docs.NewDocument(
                    id=document_id, tenant_id=tenant_id, title="Waves", filename="waves.pdf",
                    mime_type=PDF, size_bytes=len(data), file_sha256=uuid.uuid4().hex,
                    subject="physics", grade_level=10, module_tag=None, class_id=None,
                    content_type="notes", language=None, collection="educational",
                    curriculum_standards=[], topic_tags=[], source_priority=0.7,
                    freshness_date=None, version=1, previous_version_id=None,
                    object_name=name, uploaded_by="teacher-1", uploader_role="teacher",
                    metadata={},
                ),
            )  # fmt: skip
        event = DocumentUploaded(
            tenant_id=tenant_id, document_id=document_id, version=1, object_name=name,
            filename="waves.pdf", mime_type=PDF, size_bytes=len(data),
            file_sha256=uuid.uuid4().hex, uploaded_by="teacher-1", metadata=DocumentMetadata(),
        )  # fmt: skip
        storing = asyncio.Event()
        indexed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_progress(msg: Any) -> None:
            body = json.loads(msg.data)
            ours = body.get("document_id") == str(document_id) and body.get("stage") == "store"
            if ours and not storing.is_set():
                pg.cut("refuse")  # Postgres goes away just as the chunks are written
                storing.set()

        async def on_indexed(msg: Any) -> None:
            body = json.loads(msg.data)
            if body.get("document_id") == str(document_id):
                await indexed.put(body)

        await nc.subscribe("lectern.documents.progress.v1", cb=on_progress)
        await nc.subscribe(DocumentIndexed.subject, cb=on_indexed)
        await nc.jetstream().publish(event.subject, event.model_dump_json().encode())
        await asyncio.wait_for(storing.wait(), 60)
        await asyncio.sleep(3)
        row = await db_pool.fetchrow(
            "SELECT status FROM ingest_documents WHERE id = $1", document_id
        )
        assert row["status"] in ("pending", "processing"), row  # not failed for an outage
        pg.restore()
        done = await asyncio.wait_for(indexed.get(), 90)
        row = await db_pool.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", document_id)
        assert row["status"] == "indexed" and row["attempts"] >= 2, dict(row)
        chunks = await db_pool.fetch(
            "SELECT chunk_index FROM chunks WHERE document_id = $1", document_id
        )
        assert len(chunks) == done["chunk_count"] == row["chunk_count"] > 0
        assert len({c["chunk_index"] for c in chunks}) == len(chunks), "no duplicate chunks"
    finally:
        await nc.close()


class CuttingEmbedder:
    """The packaged MiniLM; Postgres goes away as soon as a list's chunks are embedded."""

    def __init__(self, inner: Embedder, proxy: PostgresProxy) -> None:
        self.inner = inner
        self.proxy = proxy
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed_documents(self, texts: Sequence[str]) -> Any:
        vectors = await self.inner.embed_documents(texts)
        if not self.cut and len(texts) > 1:
            self.cut = True
            self.proxy.cut("refuse")  # before the list's transaction
        return vectors


async def test_postgres_lost_while_a_list_is_stored_loses_no_upload(
    postgres_proxy: tuple[PostgresProxy, str], nats_url: str, db_pool: Any, tenant_id: str,
    embedder: Embedder,
) -> None:  # fmt: skip
    pg, dsn = postgres_proxy
    settings = Settings(
        nats_url=nats_url, database_url=dsn, http_port=0, log_json=False, batch_documents=8,
        db_connect_timeout_s=1.0, db_command_timeout_s=3.0,
    )  # fmt: skip
    nc = await nats.connect(nats_url)
    pool = await create_pool(dsn, min_size=1, max_size=4, timeout=1.0, command_timeout=3.0)
    try:
        cutting = CuttingEmbedder(embedder, pg)
        worker = IngestWorker(
            settings=settings, embedder=cutting, pool=pool, jetstream=nc.jetstream(),
            publish=_no_publish,
        )  # fmt: skip
        facts = [f"Fact {i}: waves of frequency {i + 2} Hz carry energy." for i in range(6)]
        events = [
            await stage_upload(
                db_pool,
                nc,
                tenant_id=tenant_id,
                data=f.encode(),
                filename=f"fact-{i}.txt",
                mime=filetype.TEXT,
            )
            for i, f in enumerate(facts)
        ]
        first = await asyncio.gather(
            *(worker.process(event=e, deliveries=1) for e in events), return_exceptions=True
        )
        assert cutting.cut
        # each message is nacked (an error) or retried, none acked as done
        assert all(isinstance(o, BaseException) or o.retry_after is not None for o in first), first
        ids = [e.document_id for e in events]
        rows = await db_pool.fetch(
            "SELECT status FROM ingest_documents WHERE id = ANY($1::uuid[])", ids
        )
        assert {r["status"] for r in rows} <= {"pending", "processing"}, rows
        assert not await db_pool.fetchval(
            "SELECT count(*) FROM chunks WHERE document_id = ANY($1::uuid[])", ids
        ), "no partial list"
        pg.restore()
        again = await asyncio.gather(*(worker.process(event=e, deliveries=2) for e in events))
        assert [o.status for o in again] == ["indexed"] * len(events)
        counts = await db_pool.fetch(
            "SELECT document_id, count(*) AS n FROM chunks WHERE document_id = ANY($1::uuid[]) "
            "GROUP BY document_id", ids,
        )  # fmt: skip
        assert sorted(r["n"] for r in counts) == [1] * len(events)
        for event in events:
            published = await outboxed(db_pool, DocumentIndexed.subject, event.document_id)
            assert len(published) == 1
    finally:
        await pool.close()
        await nc.close()


async def _no_publish(event: Any) -> None:
    return None
