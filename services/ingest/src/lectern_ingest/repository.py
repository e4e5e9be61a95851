"""SQL of the ingest worker: its record of each upload (``ingest_documents``, ingest's own:
made from ``documents.uploaded``, kept up to date by the gateway's lifecycle events), document
state and the one-transaction chunk write. Nothing here reads or writes the gateway's
``documents``: the outcome reaches it as ``documents.indexed`` / ``documents.failed``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lectern_common.db.types import Connection, Queryable
from lectern_common.events import ConflictPair, DocumentUploaded

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
    #: the document's own title, replacing the file name the upload defaulted to
    title: str | None = None


async def _copy_chunks(conn: Connection, records: list[tuple[Any, ...]]) -> None:
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


#: what ingest records of an upload from its ``documents.uploaded`` (the rest starts empty)
_UPLOAD_COLUMNS = (
    "id", "tenant_id", "version", "previous_version_id", "object_name", "title", "filename",
    "mime_type", "uploaded_by", "uploader_role", "metadata", "subject", "grade_level",
    "module_tag", "class_id", "content_type", "collection", "curriculum_standards",
    "topic_tags", "source_priority", "freshness_date", "language", "created_at",
)  # fmt: skip
#: filled in on a row a lifecycle event made before its upload arrived; the catalogue
#: columns stay as that (newer) event left them
_UPLOAD_ONLY = (
    "version", "previous_version_id", "object_name", "filename", "mime_type", "uploaded_by",
    "uploader_role", "created_at",
)  # fmt: skip
_REGISTER = f"""INSERT INTO ingest_documents ({", ".join(_UPLOAD_COLUMNS)}, uploaded)
   VALUES ({", ".join(f"${i + 1}" for i in range(len(_UPLOAD_COLUMNS)))}, true)
   ON CONFLICT (id) DO UPDATE SET
       {", ".join(f"{c} = EXCLUDED.{c}" for c in _UPLOAD_ONLY)}, uploaded = true,
       language = coalesce(ingest_documents.language, EXCLUDED.language)
   WHERE NOT ingest_documents.uploaded"""  # noqa: S608 - column names from constants


def upload_values(event: DocumentUploaded) -> tuple[Any, ...]:
    """The ``_REGISTER`` parameters of an upload."""
    meta = event.metadata
    metadata = {
        **meta.model_dump(mode="json"),
        **({"source": event.source} if event.source else {}),
    }
    return (
        event.document_id, event.tenant_id, event.version, event.replaces_document_id,
        event.object_name, meta.title or event.filename, event.filename, event.mime_type,
        event.uploaded_by, event.uploader_role, metadata, meta.subject, meta.grade_level,
        meta.module_tag, meta.class_id, meta.content_type, meta.collection,
        list(meta.curriculum_standards), list(meta.topic_tags), meta.source_priority,
        meta.freshness_date, meta.language, event.occurred_at,
    )  # fmt: skip


async def register_uploads(conn: Queryable, events: Sequence[DocumentUploaded]) -> None:
    """Ingest's record of each upload, made from its event (idempotent: a redelivery, or an
    upload whose record exists, changes nothing; a record a lifecycle event made first gets
    the upload's own fields)."""
    if events:
        await conn.executemany(_REGISTER, [upload_values(e) for e in events])


async def get_document(conn: Queryable, document_id: uuid.UUID) -> Any:
    """The document row, or None."""
    return await conn.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", document_id)


async def lock_document(conn: Queryable, document_id: uuid.UUID) -> Any:
    """The document row locked for update (inside a transaction)."""
    return await conn.fetchrow(
        "SELECT * FROM ingest_documents WHERE id = $1 FOR UPDATE", document_id
    )


async def mark_processing(conn: Queryable, document_id: uuid.UUID) -> int:
    """The document is being worked on: one more attempt started. The attempts started so
    far, this one included (0 when it is no longer pending work)."""
    started = await conn.fetchval(
        """UPDATE ingest_documents
           SET status = 'processing', attempts = attempts + 1, updated_at = now()
           WHERE id = $1 AND status IN ('pending', 'processing')
           RETURNING attempts""",
        document_id,
    )
    return int(started or 0)


async def record_retry(
    conn: Queryable, document_id: uuid.UUID, *, stage: str, message: str
) -> None:
    """Remember why the last attempt failed while the upload waits for redelivery."""
    await conn.execute(
        """UPDATE ingest_documents SET error_stage = $2, error_reason = 'retrying',
               error_message = $3, updated_at = now()
           WHERE id = $1 AND status IN ('pending', 'processing')""",
        document_id, stage, message,
    )  # fmt: skip


#: the document columns the index keeps of each document it holds chunks of
#: (``index_documents``: what retrieval shows and filters on beside a chunk)
INDEX_DOCUMENT_COLUMNS = (
    "tenant_id", "title", "filename", "uploader_role", "metadata", "subject", "module_tag",
    "class_id", "collection", "page_count", "ts_config", "created_at",
)  # fmt: skip

_INDEX_DOCUMENTS_GONE = """DELETE FROM index_documents x
   WHERE x.document_id = ANY($1::uuid[]) AND NOT EXISTS (
       SELECT 1 FROM ingest_documents d WHERE d.id = x.document_id AND d.deleted_at IS NULL
          AND d.status <> 'deleted'
          AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id))"""

_INDEX_DOCUMENTS_KEPT = f"""INSERT INTO index_documents
       (document_id, {", ".join(INDEX_DOCUMENT_COLUMNS)}, searchable)
   SELECT d.id, {", ".join(f"d.{c}" for c in INDEX_DOCUMENT_COLUMNS)}, d.status = 'indexed'
   FROM ingest_documents d
   WHERE d.id = ANY($1::uuid[]) AND d.deleted_at IS NULL AND d.status <> 'deleted'
     AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id)
   ON CONFLICT (document_id) DO UPDATE SET
       {", ".join(f"{c} = EXCLUDED.{c}" for c in INDEX_DOCUMENT_COLUMNS)},
       searchable = EXCLUDED.searchable"""  # noqa: S608 - column names from a constant


async def sync_index_documents(conn: Queryable, document_ids: Sequence[uuid.UUID]) -> None:
    """Bring the index's record of these documents (``index_documents``, which the retriever
    reads instead of the gateway's ``documents``) to ingest's rows and chunks now: a row,
    searchable while the document is indexed, for each live document with chunks; none for
    the others. Called in the transaction that changes their chunks or status, so retrieval
    never sees the one without the other."""
    ids = list(dict.fromkeys(document_ids))
    if not ids:
        return
    await conn.execute(_INDEX_DOCUMENTS_GONE, ids)
    await conn.execute(_INDEX_DOCUMENTS_KEPT, ids)


async def mark_failed(
    conn: Connection,
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
            """UPDATE ingest_documents SET status = 'failed', error_stage = $2, error_reason = $3,
                   error_message = $4, attempts = $5, chunk_count = 0, qa_count = 0,
                   updated_at = now()
               WHERE id = $1""",
            document_id, stage, reason, message, attempts,
        )  # fmt: skip
        await sync_index_documents(conn, [document_id])
    return True


async def bm25_available(conn: Queryable) -> bool:
    """Whether the retrieval migration's BM25 maintenance functions exist."""
    return bool(
        await conn.fetchval(
            "SELECT to_regprocedure('lectern_bm25_index_document(uuid)') IS NOT NULL "
            "AND to_regprocedure('lectern_bm25_unindex_document(uuid)') IS NOT NULL"
        )
    )


async def nearest_simhash(
    conn: Queryable,
    *,
    tenant_id: str,
    simhash: int,
    exclude: Sequence[uuid.UUID],
) -> tuple[uuid.UUID, int] | None:
    """The tenant's indexed document whose SimHash is closest (id, Hamming distance)."""
    return (await nearest_simhashes(conn, documents=[(tenant_id, simhash)], exclude=exclude))[0]


async def lock_content_hash(conn: Queryable, *, tenant_id: str, content_sha256: str) -> None:
    """Serialise the stores of documents with the same cleaned text (transaction-scoped)."""
    await lock_content_hashes(conn, [(tenant_id, content_sha256)])


async def find_content_duplicate(
    conn: Queryable,
    *,
    tenant_id: str,
    collection: str,
    content_sha256: str,
    exclude: Sequence[uuid.UUID],
) -> uuid.UUID | None:
    """The tenant's indexed document of the same collection with exactly this cleaned text.

    The collection is part of the match: an assessment copy of an educational text must stay
    out of students' reach, so it is not a duplicate of the educational one (nor vice versa).
    """
    found: uuid.UUID | None = await conn.fetchval(
        """SELECT id FROM ingest_documents
           WHERE tenant_id = $1 AND collection = $2 AND content_sha256 = $3
             AND status = 'indexed' AND NOT (id = ANY($4::uuid[]))
           ORDER BY indexed_at, id LIMIT 1 FOR UPDATE""",
        tenant_id, collection, content_sha256, list(exclude),
    )  # fmt: skip
    return found


async def superseded_object(conn: Queryable, document_id: uuid.UUID) -> str | None:
    """The object name of the version this document superseded, if it did."""
    name: str | None = await conn.fetchval(
        """SELECT p.object_name FROM ingest_documents d
           JOIN ingest_documents p ON p.id = d.previous_version_id
           WHERE d.id = $1 AND d.status IN ('indexed', 'duplicate') AND p.status = 'superseded'""",
        document_id,
    )
    return name


async def _supersede_previous(conn: Queryable, row: Any) -> None:
    """Retire the version ``row`` replaces: its chunks go (BM25 statistics follow by trigger).

    Runs in the transaction that makes the new version searchable, so retrieval sees the old
    chunks or the new ones, never both or neither.
    """
    previous = row["previous_version_id"]
    if previous is None:
        return
    await lock_document(conn, previous)
    await conn.execute("DELETE FROM chunks WHERE document_id = $1", previous)
    await conn.execute(
        """UPDATE ingest_documents SET status = 'superseded', chunk_count = 0, qa_count = 0,
               updated_at = now()
           WHERE id = $1 AND status <> 'deleted'""",
        previous,
    )


async def _mark_duplicate(
    conn: Queryable, *, row: Any, original_id: uuid.UUID, result: IndexedDocument
) -> None:
    """``row`` duplicates ``original_id``: no chunks (the gateway makes its uploaders
    co-owners of the original when it applies ``documents.indexed``)."""
    document_id = row["id"]
    await conn.execute("DELETE FROM chunks WHERE document_id = $1", document_id)
    await _supersede_previous(conn, row)
    await conn.execute(
        """UPDATE ingest_documents SET status = 'duplicate', duplicate_of = $2, page_count = $3,
               skipped_pages = $4, chunk_count = 0, qa_count = 0, language = $5,
               ts_config = $6::regconfig, content_sha256 = $7, simhash = $8,
               near_duplicate_of = NULL, near_duplicate_score = NULL, enriched = false,
               enrichment_note = $9, error_stage = NULL, error_reason = NULL,
               error_message = NULL, updated_at = now()
           WHERE id = $1""",
        document_id, original_id, result.page_count, result.skipped_pages, result.language,
        result.ts_config, result.content_sha256, result.simhash,
        f"same text as document {original_id}; not indexed again",
    )  # fmt: skip


async def _lock_pending(conn: Queryable, document_id: uuid.UUID, *, content_sha256: str) -> Any:
    """Lock the document's row and, while it is still pending work, its tenant's content
    hash (two copies of a text are stored one after the other); the row, or None when the
    document was deleted or finished."""
    row = await lock_document(conn, document_id)
    if row is None or row["status"] not in ("pending", "processing"):
        return None
    await lock_content_hash(conn, tenant_id=row["tenant_id"], content_sha256=content_sha256)
    return row


async def store_duplicate(
    conn: Connection, *, document: Any, original_id: uuid.UUID, result: IndexedDocument
) -> str | None:
    """Record the document as a duplicate of ``original_id`` (found before embedding).

    Returns ``"duplicate"``; ``"gone"`` when the original stopped being indexed meanwhile (the
    caller indexes the document after all); None when the document was deleted or finished.
    """
    document_id = document["id"]
    async with conn.transaction():
        row = await _lock_pending(conn, document_id, content_sha256=result.content_sha256)
        if row is None:
            return None
        original = await lock_document(conn, original_id)
        if original is None or original["status"] != "indexed":
            return "gone"
        await _mark_duplicate(conn, row=row, original_id=original_id, result=result)
    return "duplicate"


async def store_document(
    conn: Connection,
    *,
    document: Any,
    chunks: Sequence[ChunkRecord],
    embeddings: np.ndarray[Any, Any],
    result: IndexedDocument,
) -> str | None:
    """Write every chunk and the document's outcome in ONE transaction.

    Re-delivery is harmless: the document's chunks are deleted and rewritten with the same
    deterministic ids. A replaced previous version loses its chunks in the same transaction,
    so retrieval sees either the old chunks or the new ones, never both or neither. When an
    indexed document of the tenant has the same cleaned text (checked under a lock, so two
    concurrent copies cannot both index), nothing is written and the document becomes its
    duplicate. Returns ``"indexed"`` or ``"duplicate"``, or None (writing nothing) when the
    document was deleted or finished meanwhile.
    """
    document_id = document["id"]
    async with conn.transaction():
        row = await _lock_pending(conn, document_id, content_sha256=result.content_sha256)
        if row is None:
            return None
        exclude = [document_id]
        if row["previous_version_id"] is not None:
            exclude.append(row["previous_version_id"])
        original = await find_content_duplicate(
            conn, tenant_id=row["tenant_id"], collection=row["collection"],
            content_sha256=result.content_sha256, exclude=exclude,
        )  # fmt: skip
        if original is not None:
            await _mark_duplicate(conn, row=row, original_id=original, result=result)
            await sync_index_documents(conn, exclude)
            return "duplicate"
        bm25 = await bm25_available(conn)
        # pending/processing documents have no indexed chunks (those commit with 'indexed'),
        # so there are no BM25 statistics to remove; this only clears leftovers
        await conn.execute("DELETE FROM chunks WHERE document_id = $1", document_id)
        records = chunk_rows(row, chunks, embeddings, result)
        await _copy_chunks(conn, records)
        if bm25:
            await conn.execute("SELECT lectern_bm25_index_document($1)", document_id)
        await _supersede_previous(conn, row)
        await conn.execute(_INDEXED, *indexed_args(document_id, result))
        await sync_index_documents(conn, [document_id, *exclude[1:]])
    return "indexed"


_INDEXED = """UPDATE ingest_documents SET status = 'indexed', page_count = $2, skipped_pages = $3,
       chunk_count = $4, qa_count = $5, language = $6, ts_config = $7::regconfig,
       content_sha256 = $8, simhash = $9, near_duplicate_of = $10,
       near_duplicate_score = $11, enriched = $12, enrichment_note = $13,
       error_stage = NULL, error_reason = NULL, error_message = NULL,
       title = coalesce($14, title), indexed_at = now(), updated_at = now()
   WHERE id = $1"""


def indexed_args(document_id: uuid.UUID, result: IndexedDocument) -> tuple[Any, ...]:
    """The parameters of ``_INDEXED`` for one document."""
    return (
        document_id, result.page_count, result.skipped_pages, result.chunk_count,
        result.qa_count, result.language, result.ts_config, result.content_sha256,
        result.simhash, result.near_duplicate_of, result.near_duplicate_score,
        result.enriched, result.enrichment_note, result.title,
    )  # fmt: skip


def chunk_rows(
    row: Any, chunks: Sequence[ChunkRecord], embeddings: np.ndarray[Any, Any],
    result: IndexedDocument,
) -> list[tuple[Any, ...]]:  # fmt: skip
    """The COPY records of a document's chunks (``CHUNK_COLUMNS``), with its filter columns."""
    filters = [row[c] for c in FILTER_COLUMNS]
    language = result.language
    return [
        (
            c.id, row["id"], row["tenant_id"], c.chunk_index, c.kind, c.parent_chunk_id,
            c.text, c.context_prefix, c.section_path, c.chapter, c.page_start, c.page_end,
            c.slide, c.time_start, c.time_end, c.token_count, c.content_hash, True,
            *filters[:5], language, *filters[5:], result.ts_config, embeddings[i],
        )
        for i, c in enumerate(chunks)
    ]  # fmt: skip


@dataclass(frozen=True)
class Stored:
    """One document of a batch write: its locked row and what the pipeline made of it."""

    row: Any
    chunks: Sequence[ChunkRecord]
    embeddings: np.ndarray[Any, Any]
    result: IndexedDocument


async def get_documents(conn: Queryable, document_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The rows of these documents that exist, by id."""
    rows = await conn.fetch(
        "SELECT * FROM ingest_documents WHERE id = ANY($1::uuid[])", list(document_ids)
    )
    return {row["id"]: row for row in rows}


async def mark_processing_many(conn: Queryable, document_ids: Sequence[uuid.UUID]) -> None:
    """``mark_processing`` of many documents in one statement."""
    await conn.execute(
        """UPDATE ingest_documents
           SET status = 'processing', attempts = attempts + 1, updated_at = now()
           WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'processing')""",
        list(document_ids),
    )


async def lock_documents(
    conn: Queryable, document_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Any]:
    """These documents' rows locked for update in id order (inside a transaction)."""
    rows = await conn.fetch(
        "SELECT * FROM ingest_documents WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE",
        list(document_ids),
    )
    return {row["id"]: row for row in rows}


async def lock_content_hashes(conn: Queryable, keys: Sequence[tuple[str, str]]) -> None:
    """``lock_content_hash`` of many (tenant, content hash) pairs, taken in one order so that
    concurrent batches cannot wait on each other in a circle."""
    await conn.execute(
        """SELECT pg_advisory_xact_lock(h) FROM (
               SELECT DISTINCT hashtextextended('content:' || t || ':' || c, 0) AS h
               FROM unnest($1::text[], $2::text[]) AS v(t, c) ORDER BY 1) locks""",
        [k[0] for k in keys], [k[1] for k in keys],
    )  # fmt: skip


async def find_content_duplicates(
    conn: Queryable, *, documents: Sequence[tuple[str, str, str]], exclude: Sequence[uuid.UUID]
) -> list[uuid.UUID | None]:
    """``find_content_duplicate`` of many (tenant, collection, content hash) at once, without
    locking the originals: one indexed document per entry, or None."""
    rows = await conn.fetch(
        """SELECT DISTINCT ON (v.n) v.n, d.id
           FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS v(t, c, h, n)
           JOIN ingest_documents d ON d.tenant_id = v.t AND d.collection = v.c
                AND d.content_sha256 = v.h AND d.status = 'indexed'
                AND NOT (d.id = ANY($4::uuid[]))
           ORDER BY v.n, d.indexed_at, d.id""",
        [d[0] for d in documents], [d[1] for d in documents], [d[2] for d in documents],
        list(exclude),
    )  # fmt: skip
    found: list[uuid.UUID | None] = [None] * len(documents)
    for row in rows:
        found[int(row["n"]) - 1] = row["id"]
    return found


async def nearest_simhashes(
    conn: Queryable, *, documents: Sequence[tuple[str, int]], exclude: Sequence[uuid.UUID]
) -> list[tuple[uuid.UUID, int] | None]:
    """``nearest_simhash`` of many (tenant, SimHash) in one round trip."""
    rows = await conn.fetch(
        """SELECT v.n, near.id, near.distance
           FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS v(t, s, n)
           CROSS JOIN LATERAL (
               SELECT id, bit_count(int8send(simhash # v.s)) AS distance FROM ingest_documents
               WHERE tenant_id = v.t AND status = 'indexed' AND simhash IS NOT NULL
                 AND NOT (id = ANY($3::uuid[]))
               ORDER BY distance, indexed_at LIMIT 1) near""",
        [d[0] for d in documents], [d[1] for d in documents], list(exclude),
    )  # fmt: skip
    found: list[tuple[uuid.UUID, int] | None] = [None] * len(documents)
    for row in rows:
        found[int(row["n"]) - 1] = (row["id"], int(row["distance"]))
    return found


async def store_documents(conn: Connection, documents: Sequence[Stored]) -> None:
    """Write many new documents' chunks and outcomes at once: one COPY, one BM25 update and
    the ``indexed`` rows. The caller holds their row locks and their content-hash locks,
    and has checked that each is still pending work, replaces nothing and repeats no indexed
    document's text (inside the same transaction)."""
    ids = [d.row["id"] for d in documents]
    await conn.execute("DELETE FROM chunks WHERE document_id = ANY($1::uuid[])", ids)
    records = [r for d in documents for r in chunk_rows(d.row, d.chunks, d.embeddings, d.result)]
    await _copy_chunks(conn, records)
    if await bm25_available(conn):
        await conn.execute("SELECT lectern_bm25_index_documents($1::uuid[])", ids)
    await conn.executemany(_INDEXED, [indexed_args(d.row["id"], d.result) for d in documents])
    await sync_index_documents(conn, ids)


#: a tenant with at most this many indexed chunks has each new chunk compared with all of
#: them for the conflict check (~6 µs a chunk compared); a larger one goes through HNSW
CONFLICT_EXACT_BELOW = 500
#: the HNSW candidate list of the check through the index: the retriever's default
#: (``LECTERN_RETRIEVER_EF_SEARCH``) rather than pgvector's 40, which under a tenant filter on
#: a shared index can miss a near-duplicate of the chunk (a test's two-chunk tenant, once)
CONFLICT_EF_SEARCH = 200


async def conflicting_pairs(
    conn: Queryable,
    *,
    document_ids: Sequence[uuid.UUID],
    neighbours: int,
    min_similarity: float,
    exact_below: int = CONFLICT_EXACT_BELOW,
) -> dict[str, list[ConflictPair]]:
    """Compare each chunk of newly indexed documents with its nearest chunks in the tenant's
    other searchable documents: the pairs that state different numbers for the same thing or
    negate each other, by tenant (the gateway's review queue records them, from
    ``documents.conflicts``). Reads only: the caller holds a transaction (``SET LOCAL``)."""
    from lectern_ingest.conflicts import find_conflicts

    await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    await conn.execute(f"SET LOCAL hnsw.ef_search = {int(CONFLICT_EF_SEARCH)}")
    tenants = await conn.fetch(
        """SELECT d.tenant_id, array_agg(d.id) AS ids, coalesce(max(s.chunk_count), 0) AS size
           FROM ingest_documents d LEFT JOIN bm25_collection_stats s ON s.tenant_id = d.tenant_id
           WHERE d.id = ANY($1::uuid[]) GROUP BY d.tenant_id""",
        list(document_ids),
    )
    rows: list[Any] = []
    for tenant in tenants:
        # a small tenant's chunks are all compared (cheap, and exact even in a large shared
        # index); a larger one's neighbours come through the HNSW index whatever the planner's
        # statistics say: during a bulk load they lag behind (a tenant of 2,000 new chunks
        # still counted as a few), and the planner compared each new chunk with every chunk
        # of the tenant (13 ms a chunk at 2,000 chunks, growing; 0.2 ms through the index).
        # The tenant's size comes from its BM25 statistics, kept in step with its chunks.
        indexed = int(tenant["size"]) > exact_below
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            await conn.execute(f"SET LOCAL {setting} = {'off' if indexed else 'on'}")
        distance = "o.embedding <=> c.embedding" if indexed else "(o.embedding <=> c.embedding) + 0"
        rows += await conn.fetch(
            f"""SELECT c.id AS chunk_a, c.document_id AS document_a, c.tenant_id,
                       c.text AS text_a, n.id AS chunk_b, n.document_id AS document_b,
                       n.text AS text_b, n.similarity
                FROM chunks c CROSS JOIN LATERAL (
                    SELECT o.id, o.document_id, o.text,
                           1 - (o.embedding <=> c.embedding) AS similarity
                    FROM chunks o
                    WHERE o.tenant_id = c.tenant_id AND o.document_id <> c.document_id
                      AND o.active AND o.kind IN ('text', 'table')
                    ORDER BY {distance} LIMIT {int(neighbours)}) n
                WHERE c.document_id = ANY($1::uuid[]) AND c.kind IN ('text', 'table')
                  AND n.similarity >= $2""",  # noqa: S608 - an int and fixed expressions
            list(tenant["ids"]),
            min_similarity,
        )
    found: dict[str, list[ConflictPair]] = {}
    for row in rows:
        for conflict in find_conflicts(row["text_a"], row["text_b"], limit=1):
            found.setdefault(row["tenant_id"], []).append(ConflictPair(
                chunk_a=row["chunk_a"], chunk_b=row["chunk_b"], document_a=row["document_a"],
                document_b=row["document_b"], kind=conflict.kind,
                statement_a=conflict.statement_a, statement_b=conflict.statement_b,
                detail=conflict.detail, similarity=float(row["similarity"]),
            ))  # fmt: skip
    return found


async def reweight(conn: Connection, *, tenant_id: str) -> int | None:
    """Recompute the tenant's BM25 weights (None: another replica is doing it right now)."""
    async with conn.transaction():
        if not await conn.fetchval(
            "SELECT pg_try_advisory_xact_lock(hashtext('lectern-bm25-reweight:' || $1))",
            tenant_id,
        ):
            return None
        return int(await conn.fetchval("SELECT lectern_bm25_reweight($1)", tenant_id))


async def stale_tenants(conn: Queryable, *, drift: float) -> list[str]:
    """Tenants whose chunk count drifted by more than ``drift`` since their last re-weighting."""
    rows = await conn.fetch("SELECT lectern_bm25_stale_tenants($1) AS tenant_id", drift)
    return [r["tenant_id"] for r in rows]
