"""SQL of the document routes (every query scoped by tenant)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from lectern_common.db.types import Queryable
from lectern_common.events import DocumentFailed, DocumentIndexed, DocumentState
from lectern_common.events.documents import STATE_COLUMNS

ACTIVE_STATUSES = ("pending", "processing", "indexed")
FINAL_STATUSES = ("indexed", "duplicate", "failed", "superseded", "archived", "deleted")

_COLUMNS = """id, tenant_id, title, filename, mime_type, size_bytes, file_sha256, content_sha256,
    near_duplicate_of, near_duplicate_score, status, error_stage, error_reason, error_message,
    attempts, page_count, skipped_pages, chunk_count, qa_count, language, enriched,
    enrichment_note, metadata, subject, grade_level, module_tag, class_id, content_type,
    collection, curriculum_standards, topic_tags, source_priority, freshness_date, version,
    previous_version_id, object_name, uploaded_by, uploader_role, co_owners, created_at,
    updated_at, indexed_at, deleted_at, duplicate_of, deleted_by"""


@dataclass(frozen=True)
class NewDocument:
    """A row to insert for an accepted upload."""

    id: uuid.UUID
    tenant_id: str
    title: str
    filename: str
    mime_type: str
    size_bytes: int
    file_sha256: str
    subject: str | None
    grade_level: int | None
    module_tag: str | None
    class_id: str | None
    content_type: str | None
    language: str | None
    collection: str
    curriculum_standards: list[str]
    topic_tags: list[str]
    source_priority: float
    freshness_date: date | None
    version: int
    previous_version_id: uuid.UUID | None
    object_name: str
    uploaded_by: str
    uploader_role: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ListFilters:
    """Filters of ``GET /v1/documents``."""

    status: str | None = None
    subject: str | None = None
    collection: str | None = None
    module_tag: str | None = None
    class_id: str | None = None
    content_type: str | None = None
    language: str | None = None
    grade_level: int | None = None
    filename: str | None = None
    title: str | None = None
    uploaded_by: str | None = None
    include_deleted: bool = False
    #: a student's classes: documents of those classes or of none (None: any class)
    visible_classes: list[str] | None = None


async def get_document(conn: Queryable, *, tenant_id: str, document_id: uuid.UUID) -> Any:
    """One document of the tenant, or None."""
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM documents WHERE tenant_id = $1 AND id = $2",  # noqa: S608
        tenant_id,
        document_id,
    )


async def lock_file_hash(conn: Queryable, *, tenant_id: str, file_sha256: str) -> None:
    """Serialise concurrent uploads of the same bytes in one tenant (transaction-scoped)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{tenant_id}:{file_sha256}"
    )


async def find_by_file_hash(conn: Queryable, *, tenant_id: str, file_sha256: str) -> Any:
    """The live document holding exactly these bytes in the tenant, if any."""
    return await conn.fetchrow(
        f"""SELECT {_COLUMNS} FROM documents
            WHERE tenant_id = $1 AND file_sha256 = $2 AND status = ANY($3::text[])
            ORDER BY created_at LIMIT 1""",  # noqa: S608
        tenant_id,
        file_sha256,
        list(ACTIVE_STATUSES),
    )


async def pending_version(conn: Queryable, *, document_id: uuid.UUID) -> Any:
    """A newer version of the document that is still being indexed, if any."""
    return await conn.fetchrow(
        f"""SELECT {_COLUMNS} FROM documents
            WHERE previous_version_id = $1 AND status IN ('pending', 'processing')
            ORDER BY created_at LIMIT 1""",  # noqa: S608
        document_id,
    )


async def add_co_owner(conn: Queryable, *, document_id: uuid.UUID, user_id: str) -> Any:
    """Record another uploader of the same bytes; returns the updated row."""
    return await conn.fetchrow(
        f"""UPDATE documents
            SET co_owners = CASE WHEN $2 = uploaded_by OR $2 = ANY(co_owners) THEN co_owners
                                 ELSE array_append(co_owners, $2) END,
                updated_at = CASE WHEN $2 = uploaded_by OR $2 = ANY(co_owners) THEN updated_at
                                  ELSE now() END
            WHERE id = $1 RETURNING {_COLUMNS}""",  # noqa: S608
        document_id,
        user_id,
    )


async def insert_document(conn: Queryable, doc: NewDocument) -> Any:
    """Insert an accepted upload as ``pending``; returns the row."""
    return await conn.fetchrow(
        f"""INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes,
                file_sha256, status, subject, grade_level, module_tag, class_id, content_type,
                language, collection, curriculum_standards, topic_tags, source_priority,
                freshness_date, version, previous_version_id, object_name, uploaded_by,
                uploader_role, metadata)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11, $12, $13, $14,
                $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
            RETURNING {_COLUMNS}""",  # noqa: S608
        doc.id, doc.tenant_id, doc.title, doc.filename, doc.mime_type, doc.size_bytes,
        doc.file_sha256, doc.subject, doc.grade_level, doc.module_tag, doc.class_id,
        doc.content_type, doc.language, doc.collection, doc.curriculum_standards,
        doc.topic_tags, doc.source_priority, doc.freshness_date, doc.version,
        doc.previous_version_id, doc.object_name, doc.uploaded_by, doc.uploader_role,
        doc.metadata,
    )  # fmt: skip


async def list_documents(
    conn: Queryable,
    *,
    tenant_id: str,
    filters: ListFilters,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> list[Any]:
    """A page of the tenant's documents, newest first (keyset pagination)."""
    clauses = ["tenant_id = $1"]
    args: list[Any] = [tenant_id]

    def add(sql: str, value: Any) -> None:
        args.append(value)
        clauses.append(sql.format(f"${len(args)}"))

    if filters.status is not None:
        add("status = {}", filters.status)
    elif not filters.include_deleted:
        clauses.append("status <> 'deleted'")
    for column in ("subject", "collection", "module_tag", "class_id", "content_type",
                   "language", "grade_level", "filename", "title", "uploaded_by"):  # fmt: skip
        value = getattr(filters, column)
        if value is not None:
            add(f"{column} = {{}}", value)
    if filters.visible_classes is not None:
        add("(class_id IS NULL OR class_id = ANY({}::text[]))", filters.visible_classes)
    if after is not None:
        args.extend(after)
        clauses.append(f"(created_at, id) < (${len(args) - 1}, ${len(args)})")
    args.append(limit)
    sql = (
        f"SELECT {_COLUMNS} FROM documents WHERE {' AND '.join(clauses)} "  # noqa: S608
        f"ORDER BY created_at DESC, id DESC LIMIT ${len(args)}"
    )
    return list(await conn.fetch(sql, *args))


async def lock_for_delete(conn: Queryable, *, tenant_id: str, document_id: uuid.UUID) -> Any:
    """Lock a document row for deletion (inside a transaction); the full row, or None."""
    return await conn.fetchrow(
        f"""SELECT {_COLUMNS} FROM documents
            WHERE tenant_id = $1 AND id = $2 FOR UPDATE""",  # noqa: S608
        tenant_id,
        document_id,
    )


async def mark_deleted(conn: Queryable, *, document_id: uuid.UUID, deleted_by: str) -> Any:
    """Mark the document deleted (inside a transaction); the row. Its chunks are ingest's:
    they go when ingest applies the ``documents.deleted`` written to the outbox with this."""
    return await conn.fetchrow(
        f"""UPDATE documents SET status = 'deleted', deleted_at = now(), deleted_by = $2,
                updated_at = now()
            WHERE id = $1 RETURNING {_COLUMNS}""",  # noqa: S608
        document_id,
        deleted_by,
    )


async def audit(
    conn: Queryable, *, staff: Any, document_id: uuid.UUID, action: str, changes: dict[str, Any]
) -> None:
    """One entry of the document's audit log: ``changes`` maps a field to ``[before, after]``."""
    await conn.execute(
        "INSERT INTO document_audit (id, tenant_id, document_id, actor, action, changes) "
        "VALUES ($1, $2, $3, $4, $5, $6)",
        uuid.uuid4(), staff.tenant_id, document_id, staff.user_id, action, changes,
    )  # fmt: skip


#: the document columns a teacher may change: the only names ``update_metadata`` puts into
#: its statement (ingest copies those chunks carry for retrieval's filters onto them)
METADATA_COLUMNS = frozenset(
    {
        "title", "subject", "grade_level", "module_tag", "class_id", "collection",
        "curriculum_standards", "topic_tags", "freshness_date", "source_priority",
    }
)  # fmt: skip


def _columns(names: Any) -> list[str]:
    unknown = set(names) - METADATA_COLUMNS
    if unknown:
        raise ValueError(f"not a metadata column: {sorted(unknown)}")
    return list(names)


async def update_metadata(conn: Queryable, document_id: uuid.UUID, values: dict[str, Any]) -> None:
    """Set the document's metadata ``values`` (column -> value)."""
    names = _columns(values)
    sets = ", ".join(f"{n} = ${i + 2}" for i, n in enumerate(names))
    await conn.execute(
        f"UPDATE documents SET {sets}, updated_at = now() WHERE id = $1",  # noqa: S608
        document_id, *values.values(),
    )  # fmt: skip


async def set_status(conn: Queryable, document_id: uuid.UUID, status: str) -> None:
    """A new status (ingest brings the chunks to it when it applies the change's event)."""
    await conn.execute(
        "UPDATE documents SET status = $2, updated_at = now() WHERE id = $1", document_id, status
    )


async def next_revision(conn: Queryable, document_id: uuid.UUID) -> DocumentState:
    """Count one more change of the row (inside the change's transaction); its state after it,
    which the change's event carries to ingest (newer revisions win there)."""
    row = await conn.fetchrow(
        f"UPDATE documents SET revision = revision + 1 WHERE id = $1 "  # noqa: S608
        f"RETURNING revision, {', '.join(STATE_COLUMNS)}",
        document_id,
    )
    return DocumentState.model_validate(dict(row))


_INDEXED = """UPDATE documents SET
       status = CASE WHEN $2::uuid IS NULL THEN 'indexed' ELSE 'duplicate' END,
       duplicate_of = $2, page_count = $3, skipped_pages = $4, chunk_count = $5, qa_count = $6,
       language = coalesce($7, language), ts_config = coalesce($8::regconfig, ts_config),
       content_sha256 = $9, simhash = $10, near_duplicate_of = $11, near_duplicate_score = $12,
       enriched = $13, enrichment_note = $14, error_stage = NULL, error_reason = NULL,
       error_message = NULL,
       title = CASE WHEN revision = 0 THEN coalesce($15, title) ELSE title END,
       indexed_at = $16, updated_at = now()
   WHERE id = $1 AND status IN ('pending', 'processing')
   RETURNING previous_version_id, duplicate_of, uploaded_by, co_owners"""


async def apply_indexed(conn: Queryable, event: DocumentIndexed) -> bool:
    """``documents.indexed`` on the row (inside a transaction): indexed, or a duplicate whose
    uploaders become co-owners of the original; the version it replaces superseded. Its
    title is the document's own (found in its text) unless a teacher has changed the row."""
    row = await conn.fetchrow(
        _INDEXED, event.document_id, event.duplicate_of, event.page_count, event.skipped_pages,
        event.chunk_count, event.qa_count, event.language, event.ts_config,
        event.content_sha256, event.simhash, event.near_duplicate_of,
        event.near_duplicate_score, event.enriched, event.enrichment_note, event.title,
        event.occurred_at,
    )  # fmt: skip
    if row is None:
        return False
    if row["previous_version_id"] is not None:
        await conn.execute(
            """UPDATE documents SET status = 'superseded', chunk_count = 0, qa_count = 0,
                   updated_at = now()
               WHERE id = $1 AND status <> 'deleted'""",
            row["previous_version_id"],
        )
    if row["duplicate_of"] is not None:
        await conn.execute(
            """UPDATE documents d
               SET co_owners = d.co_owners || ARRAY(
                       SELECT u FROM unnest($2::text[]) WITH ORDINALITY AS x(u, n)
                       WHERE u <> d.uploaded_by AND NOT (u = ANY(d.co_owners)) ORDER BY n),
                   updated_at = now()
               WHERE id = $1 AND EXISTS (
                   SELECT 1 FROM unnest($2::text[]) u
                   WHERE u <> d.uploaded_by AND NOT (u = ANY(d.co_owners)))""",
            row["duplicate_of"], list(dict.fromkeys([row["uploaded_by"], *row["co_owners"]])),
        )  # fmt: skip
    return True


async def mark_processing(conn: Queryable, document_id: uuid.UUID) -> bool:
    """Ingest reports progress on a pending document: it is ``processing``."""
    status: str = await conn.execute(
        "UPDATE documents SET status = 'processing', updated_at = now() "
        "WHERE id = $1 AND status = 'pending'",
        document_id,
    )
    return status.endswith(" 1")


async def apply_failed(conn: Queryable, event: DocumentFailed) -> bool:
    """``documents.failed`` on the row: failed, with the stage, reason and message."""
    status: str = await conn.execute(
        """UPDATE documents SET status = 'failed', error_stage = $2, error_reason = $3,
               error_message = $4, attempts = $5, chunk_count = 0, qa_count = 0,
               updated_at = now()
           WHERE id = $1 AND status IN ('pending', 'processing')""",
        event.document_id, event.stage.value, event.reason.value, event.message, event.attempts,
    )  # fmt: skip
    return status.endswith(" 1")


async def mark_superseded(conn: Queryable, document_id: uuid.UUID, *, by: uuid.UUID) -> None:
    """The document superseded by ``by`` (kept in its metadata)."""
    await conn.execute(
        "UPDATE documents SET status = 'superseded', updated_at = now(), "
        "metadata = metadata || jsonb_build_object('superseded_by', $2::text) WHERE id = $1",
        document_id, str(by),
    )  # fmt: skip


async def versions(conn: Queryable, *, tenant_id: str, document_id: uuid.UUID) -> list[Any]:
    """Every version of the document ``document_id`` belongs to, newest first."""
    return list(
        await conn.fetch(
            """WITH RECURSIVE older AS (
                   SELECT * FROM documents WHERE id = $1 AND tenant_id = $2
                   UNION SELECT d.* FROM documents d JOIN older o ON d.id = o.previous_version_id
               ), newer AS (
                   SELECT * FROM documents WHERE id = $1 AND tenant_id = $2
                   UNION SELECT d.* FROM documents d JOIN newer n ON d.previous_version_id = n.id
               )
               SELECT DISTINCT id, version, status, title, filename, chunk_count, created_at,
                      indexed_at
               FROM (SELECT * FROM older UNION ALL SELECT * FROM newer) v
               WHERE tenant_id = $2 ORDER BY version DESC, created_at DESC""",
            document_id, tenant_id,
        )
    )  # fmt: skip


async def audit_entries(conn: Queryable, *, tenant_id: str, document_id: uuid.UUID) -> list[Any]:
    """The document's audit log, oldest first."""
    return list(
        await conn.fetch(
            "SELECT id, document_id, actor, action, changes, at FROM document_audit "
            "WHERE tenant_id = $1 AND document_id = $2 ORDER BY at, id",
            tenant_id, document_id,
        )
    )  # fmt: skip
