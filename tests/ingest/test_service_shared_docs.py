"""Every file of ../shared/data/docs through the real worker: indexed, or failed right.

Nothing may hang, crash the worker, or leave a half-indexed document: a failed document
has no chunks, an indexed one has chunks that fit the embedder.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from lectern_common import filetype
from lectern_common.embeddings import LocalEmbedder
from lectern_common.errors import BadInputError
from lectern_common.events import DocumentUploaded, Event
from lectern_common.objects import object_name, put_file, put_password
from lectern_gateway.documents import repository as docs
from lectern_ingest.config import Settings
from lectern_ingest.service import IngestWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.shared_data]

#: the 400-page manual is the ingest benchmark's; set LECTERN_TEST_ALL_DOCS=1 to include it here
LARGE = {"irs-manual-400p.pdf"}

#: files whose outcome is fixed: (status, stage, reason)
EXPECTED: dict[str, tuple[str, str | None, str | None]] = {
    "empty-0-bytes.pdf": ("failed", "extract", "empty_file"),
    "encrypted-userpw-openpassword.pdf": ("failed", "extract", "encrypted"),
    "encrypted-rc4-40-foo.pdf": ("failed", "extract", "encrypted"),
    "textbook-ch2-induction-48p.pdf": ("indexed", None, None),
    "ibm-redbook-sampled-18p.pdf": ("indexed", None, None),
    "ca-warn-report-table-16p.pdf": ("indexed", None, None),
    "geotopo-lecture-notes-de-117p.pdf": ("indexed", None, None),
    "tracemonkey-paper-2col-14p.pdf": ("indexed", None, None),
    "turner-syndrome-review-2col.pdf": ("indexed", None, None),
    "owner-pw-copy-protected-2p.pdf": ("indexed", None, None),
    "corrupted-recoverable.pdf": ("indexed", None, None),
    "winter-sports-gutenberg.epub": ("indexed", None, None),
    "word-tables.docx": ("indexed", None, None),
    "wikipedia-duck.html": ("indexed", None, None),
    "irs-manual-400p.pdf": ("indexed", None, None),
}
#: OCR is optional: with tesseract the scan is read, without it the document has no text
EXPECTED["scanned-no-textlayer.pdf"] = (
    ("indexed", None, None) if shutil.which("tesseract") else ("failed", "extract", "no_text")
)

#: passwords for a second run of the encrypted files
PASSWORDS = {"encrypted-userpw-openpassword.pdf": "openpassword", "encrypted-rc4-40-foo.pdf": "foo"}


def shared_files(root: Path) -> list[Path]:
    """The documents to ingest (MANIFEST excluded)."""
    found = [p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".tsv"]
    if os.environ.get("LECTERN_TEST_ALL_DOCS") != "1":
        found = [p for p in found if p.name not in LARGE]
    return found


@pytest.fixture(scope="module")
async def worker(
    nats_url: str, database_url: str, db_pool: Any, jetstream: Any
) -> AsyncIterator[tuple[IngestWorker, Any]]:
    """A worker on the session's servers (no consumer: deliveries are made directly)."""
    del jetstream  # requested for its side effect: the streams and the bucket exist
    settings = Settings(
        nats_url=nats_url, database_url=database_url, http_port=0, log_json=False,
        document_timeout_s=240.0,
    )  # fmt: skip
    nc = await nats.connect(nats_url)
    published: list[Event] = []

    async def publish(event: Event) -> None:
        published.append(event)

    ingest = IngestWorker(
        settings=settings, embedder=LocalEmbedder(settings), pool=db_pool,
        jetstream=nc.jetstream(), publish=publish,
    )  # fmt: skip
    yield ingest, nc
    await nc.drain()


async def stage(
    path: Path, *, nc: Any, db_pool: Any, tenant_id: str, password: str | None = None
) -> DocumentUploaded:
    """Bytes into the object store and a pending row, as the gateway does."""
    try:
        mime = filetype.detect_mime_path(path, path.name)
    except BadInputError:
        mime = filetype.PDF  # the empty file: the gateway refuses it, the worker must too
    document_id = uuid.uuid4()
    name = object_name(document_id, 1)
    size = await put_file(nc.jetstream(), name=name, path=path)
    if password is not None:
        await put_password(nc.jetstream(), name=name, password=password)
    digest = hashlib.sha256(await asyncio.to_thread(path.read_bytes)).hexdigest()
    async with db_pool.acquire() as conn:
        await docs.insert_document(
            conn,
            docs.NewDocument(
                id=document_id, tenant_id=tenant_id, title=path.stem, filename=path.name,
                mime_type=mime, size_bytes=size, file_sha256=digest, subject=None,
                grade_level=None, module_tag=None, class_id=None, content_type=None,
                language=None, collection="educational", curriculum_standards=[],
                topic_tags=[], source_priority=0.7, freshness_date=None, version=1,
                previous_version_id=None, object_name=name, uploaded_by="t",
                uploader_role="teacher", metadata={},
            ),
        )  # fmt: skip
    return DocumentUploaded(
        tenant_id=tenant_id, document_id=document_id, version=1, object_name=name,
        filename=path.name, mime_type=mime, size_bytes=size, file_sha256=digest,
        uploaded_by="t", has_password=password is not None,
    )  # fmt: skip


async def test_every_shared_document_is_indexed_or_fails_cleanly(
    shared_data: Path, worker: tuple[IngestWorker, Any], db_pool: Any, tenant_id: str
) -> None:
    ingest, nc = worker
    files = shared_files(shared_data / "docs")
    assert len(files) >= 20
    report: dict[str, tuple[str, str | None, str | None, int]] = {}
    problems: list[str] = []
    for path in files:
        event = await stage(path, nc=nc, db_pool=db_pool, tenant_id=tenant_id)
        outcome = await asyncio.wait_for(ingest.process(event=event, deliveries=1), 300)
        assert outcome.retry_after is None, f"{path.name}: retried ({outcome})"
        row = await db_pool.fetchrow(
            "SELECT * FROM ingest_documents WHERE id = $1", event.document_id
        )
        chunks = await db_pool.fetch(
            "SELECT kind, token_count, page_start, section_path, text FROM chunks "
            "WHERE document_id = $1", event.document_id,
        )  # fmt: skip
        report[path.name] = (row["status"], row["error_stage"], row["error_reason"], len(chunks))
        if row["status"] not in ("indexed", "failed"):
            problems.append(f"{path.name}: left {row['status']}")
        elif row["status"] == "failed":
            if chunks:
                problems.append(f"{path.name} failed but left chunks")
            if row["error_stage"] != "extract" or not row["error_message"]:
                problems.append(f"{path.name}: {report[path.name]} {row['error_message']}")
        elif not chunks or row["chunk_count"] + row["qa_count"] != len(chunks):
            problems.append(f"{path.name}: indexed with {len(chunks)} chunks")
        elif max(c["token_count"] for c in chunks) > 256 or not all(
            c["text"].strip() for c in chunks
        ):
            problems.append(f"{path.name}: an empty or over-long chunk")
    for name, (status, stage_, reason) in EXPECTED.items():
        if name in report and report[name][:3] != (status, stage_, reason):
            problems.append(f"{name}: expected {(status, stage_, reason)}, got {report[name]}")
    assert not problems, "\n".join(problems)

    textbook = "textbook-ch2-induction-48p.pdf"
    if textbook in report:
        row = await db_pool.fetchrow(
            "SELECT id, page_count FROM ingest_documents WHERE tenant_id = $1 AND filename = $2",
            tenant_id, textbook,
        )  # fmt: skip
        assert row["page_count"] == 48
        pages = await db_pool.fetch(
            "SELECT DISTINCT page_start FROM chunks WHERE document_id = $1", row["id"]
        )
        assert len(pages) >= 40, "chunks carry the pages they come from"
        paths = await db_pool.fetch(
            "SELECT DISTINCT section_path FROM chunks WHERE document_id = $1", row["id"]
        )
        assert len(paths) > 3, "headings give chunks their section paths"

    german = await db_pool.fetchrow(
        "SELECT language, ts_config::text AS ts FROM ingest_documents WHERE tenant_id = $1 "
        "AND filename = 'geotopo-lecture-notes-de-117p.pdf'", tenant_id,
    )  # fmt: skip
    if german is not None:
        assert (german["language"], german["ts"]) == ("de", "german")

    for number, (name, password) in enumerate(PASSWORDS.items()):
        # one tenant each: the two encrypted samples may hold the same text (a duplicate)
        event = await stage(
            shared_data / "docs" / name, nc=nc, db_pool=db_pool,
            tenant_id=f"{tenant_id}-pw{number}", password=password,
        )  # fmt: skip
        outcome = await ingest.process(event=event, deliveries=1)
        assert outcome.status == "indexed", f"{name} with its password: {outcome}"
