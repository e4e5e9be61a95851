"""SQL of the ingest worker: document state and the one-transaction chunk write."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CHUNK_COLUMNS = (
    "id", "document_id", "tenant_id", "chunk_index", "kind", "parent_chunk_id", "text",
    "context_prefix", "section_path", "chapter", "page_start", "page_end", "slide",
    "time_start", "time_end", "token_count", "content_hash", "active", "subject",
    "grade_level", "module_tag", "class_id", "content_type", "language", "collection",
    "curriculum_standards", "topic_tags", "source_priority", "freshness_date", "uploaded_by",
    "ts_config", "embedding",
)  # fmt: skip

#: document columns copied onto every chunk (the filter columns)
FILTER_COLUMNS = (
    "subject", "grade_level", "module_tag", "class_id", "content_type", "collection",
    "curriculum_standards", "topic_tags", "source_priority", "freshness_date", "uploaded_by",
)  # fmt: skip


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk ready to store (without the document's filter columns)."""

    id: uuid.UUID
    chunk_index: int
    kind: str
    parent_chunk_id: uuid.UUID | None
    text: str
    context_prefix: str | None
    section_path: list[str]
    chapter: str | None
    page_start: int | None
    page_end: int | None
    slide: int | None
    time_start: float | None
    time_end: float | None
    token_count: int
    content_hash: str


@dataclass(frozen=True)
class IndexedDocument:
    """What the store step records on the document row."""

    page_count: int | None
    skipped_pages: int
    chunk_count: int
    qa_count: int
    language: str | None
    ts_config: str
    content_sha256: str
    simhash: int
    near_duplicate_of: uuid.UUID | None
    near_duplicate_score: float | None
    enriched: bool
    enrichment_note: str | None


async def _copy_chunks(conn: Any, records: list[tuple[Any, ...]]) -> None:
    """Bulk-insert chunks with COPY through a staging table.

    asyncpg has no binary encoder for ``regconfig``, so the staging table holds ts_config as
    text and the INSERT casts it.
    """
    columns = ", ".join(CHUNK_COLUMNS)
    staged = ", ".join(c if c != "ts_config" else "ts_config::text AS ts_config"
                       for c in CHUNK_COLUMNS)  # fmt: skip
    await conn.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS _ingest_chunks ON COMMIT DROP AS "  # noqa: S608
        f"SELECT {staged} FROM chunks WITH NO DATA"
    )
    await conn.copy_records_to_table("_ingest_chunks", records=records, columns=CHUNK_COLUMNS)
    selected = ", ".join(c if c != "ts_config" else "ts_config::regconfig"
                         for c in CHUNK_COLUMNS)  # fmt: skip
    await conn.execute(
        f"INSERT INTO chunks ({columns}) SELECT {selected} FROM _ingest_chunks"  # noqa: S608
    )
    await conn.execute("DROP TABLE _ingest_chunks")


async def get_document(conn: Any, document_id: uuid.UUID) -> Any:
    """The document row, or None."""
    return await conn.fetchrow("SELECT * FROM documents WHERE id = $1", document_id)


async def lock_document(conn: Any, document_id: uuid.UUID) -> Any:
    """The document row locked for update (inside a transaction)."""
    return await conn.fetchrow("SELECT * FROM documents WHERE id = $1 FOR UPDATE", document_id)


async def mark_processing(conn: Any, document_id: uuid.UUID, *, attempts: int) -> None:
    """The document is being worked on (delivery ``attempts``)."""
    await conn.execute(
        """UPDATE documents SET status = 'processing', attempts = $2, updated_at = now()
           WHERE id = $1 AND status IN ('pending', 'processing')""",
        document_id,
        attempts,
    )


async def record_retry(
    conn: Any, document_id: uuid.UUID, *, attempts: int, stage: str, message: str
) -> None:
    """Remember why the last attempt failed while the upload waits for redelivery."""
    await conn.execute(
        """UPDATE documents SET attempts = $2, error_stage = $3, error_reason = 'retrying',
               error_message = $4, updated_at = now()
           WHERE id = $1 AND status IN ('pending', 'processing')""",
        document_id, attempts, stage, message,
    )  # fmt: skip


async def mark_failed(
    conn: Any,
    document_id: uuid.UUID,
    *,
    stage: str,
    reason: str,
    message: str,
    attempts: int,
) -> bool:
    """Failed with no chunk left behind; False when the document is no longer pending work."""
    async with conn.transaction():
        row = await lock_document(conn, document_id)
        if row is None or row["status"] not in ("pending", "processing"):
            return False
        await conn.execute("DELETE FROM chunks WHERE document_id = $1", document_id)
        await conn.execute(
            """UPDATE documents SET status = 'failed', error_stage = $2, error_reason = $3,
                   error_message = $4, attempts = $5, chunk_count = 0, qa_count = 0,
                   updated_at = now()
               WHERE id = $1""",
            document_id, stage, reason, message, attempts,
        )  # fmt: skip
    return True


async def bm25_available(conn: Any) -> bool:
    """Whether the retrieval migration's BM25 maintenance functions exist."""
    return bool(
        await conn.fetchval(
            "SELECT to_regprocedure('lectern_bm25_index_document(uuid)') IS NOT NULL "
            "AND to_regprocedure('lectern_bm25_unindex_document(uuid)') IS NOT NULL"
        )
    )


async def nearest_simhash(
    conn: Any,
    *,
    tenant_id: str,
    simhash: int,
    exclude: Sequence[uuid.UUID],
) -> tuple[uuid.UUID, int] | None:
    """The tenant's indexed document whose SimHash is closest (id, Hamming distance)."""
    row = await conn.fetchrow(
        """SELECT id, bit_count(int8send(simhash # $2)) AS distance FROM documents
           WHERE tenant_id = $1 AND status = 'indexed' AND simhash IS NOT NULL
             AND NOT (id = ANY($3::uuid[]))
           ORDER BY distance, indexed_at LIMIT 1""",
        tenant_id,
        simhash,
        list(exclude),
    )
    if row is None:
        return None
    return row["id"], int(row["distance"])


async def store_document(
    conn: Any,
    *,
    document: Any,
    chunks: Sequence[ChunkRecord],
    embeddings: np.ndarray[Any, Any],
    result: IndexedDocument,
) -> bool:
    """Write every chunk and the document's outcome in ONE transaction.

    Re-delivery is harmless: the document's chunks are deleted and rewritten with the same
    deterministic ids. A replaced previous version is superseded in the same transaction, so
    retrieval sees either the old chunks or the new ones, never both or neither. Returns False
    (writing nothing) when the document was deleted or finished meanwhile.
    """
    document_id = document["id"]
    async with conn.transaction():
        row = await lock_document(conn, document_id)
        if row is None or row["status"] not in ("pending", "processing"):
            return False
        bm25 = await bm25_available(conn)
        # pending/processing documents have no indexed chunks (those commit with 'indexed'),
        # so there are no BM25 statistics to remove; this only clears leftovers
        await conn.execute("DELETE FROM chunks WHERE document_id = $1", document_id)
        filters = [row[c] for c in FILTER_COLUMNS]
        language = result.language
        records = [
            (
                c.id, document_id, row["tenant_id"], c.chunk_index, c.kind, c.parent_chunk_id,
                c.text, c.context_prefix, c.section_path, c.chapter, c.page_start, c.page_end,
                c.slide, c.time_start, c.time_end, c.token_count, c.content_hash, True,
                *filters[:5], language, *filters[5:], result.ts_config, embeddings[i],
            )
            for i, c in enumerate(chunks)
        ]  # fmt: skip
        await _copy_chunks(conn, records)
        if bm25:
            await conn.execute("SELECT lectern_bm25_index_document($1)", document_id)
        previous = row["previous_version_id"]
        if previous is not None:
            old = await lock_document(conn, previous)
            if bm25 and old is not None and old["status"] == "indexed":
                await conn.execute("SELECT lectern_bm25_unindex_document($1)", previous)
            await conn.execute("UPDATE chunks SET active = false WHERE document_id = $1", previous)
            await conn.execute(
                """UPDATE documents SET status = 'superseded', updated_at = now()
                   WHERE id = $1 AND status <> 'deleted'""",
                previous,
            )
        await conn.execute(
            """UPDATE documents SET status = 'indexed', page_count = $2, skipped_pages = $3,
                   chunk_count = $4, qa_count = $5, language = $6, ts_config = $7::regconfig,
                   content_sha256 = $8, simhash = $9, near_duplicate_of = $10,
                   near_duplicate_score = $11, enriched = $12, enrichment_note = $13,
                   error_stage = NULL, error_reason = NULL, error_message = NULL,
                   indexed_at = now(), updated_at = now()
               WHERE id = $1""",
            document_id, result.page_count, result.skipped_pages, result.chunk_count,
            result.qa_count, result.language, result.ts_config, result.content_sha256,
            result.simhash, result.near_duplicate_of, result.near_duplicate_score,
            result.enriched, result.enrichment_note,
        )  # fmt: skip
    return True
