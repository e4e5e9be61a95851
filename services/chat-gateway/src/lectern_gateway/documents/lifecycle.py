"""A teacher keeps the library right: edit a document's metadata, archive and restore it,
supersede it, and read who changed what.

The gateway owns ``documents``; ingest owns ``chunks`` and the BM25 statistics. Each change
is written to the document's row and ``document_audit`` and announced
(``documents.updated`` / ``archived`` / ``restored``, each with the row's state after the
change and its revision) through the outbox, all in one transaction; ingest applies the
announced change to its own record of the document and to the chunks (``lectern_ingest.lifecycle``:
the metadata retrieval filters on copied, nothing re-embedded; an archived or superseded
document's chunks out of retrieval and of the statistics, back on restore). The outbox relays
at commit, so search and chat see the change a few tens of milliseconds after the response,
and whenever ingest is back if it was down: nothing is lost in between.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from lectern_common.db.types import Connection, Pool
from lectern_common.events import DocumentArchived, DocumentRestored, DocumentUpdated
from lectern_common.outbox import enqueue
from lectern_gateway.auth import Principal, StaffDep
from lectern_gateway.deps import PoolDep
from lectern_gateway.documents import repository as repo
from lectern_gateway.documents.views import DocumentView, document_view
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["documents"])

#: document fields a teacher may change
EDITABLE = repo.METADATA_COLUMNS


class DocumentPatch(BaseModel):
    """Metadata to change; fields left out stay, ``null`` clears one."""

    title: str | None = Field(default=None, min_length=1, max_length=300)
    subject: str | None = Field(default=None, max_length=200)
    grade_level: int | None = Field(default=None, ge=0, le=16)
    module_tag: str | None = Field(default=None, max_length=200)
    class_id: str | None = Field(default=None, max_length=200)
    collection: Literal["educational", "assessment"] | None = None
    curriculum_standards: list[str] | None = Field(default=None, max_length=100)
    topic_tags: list[str] | None = Field(default=None, max_length=100)
    freshness_date: dt.date | None = None
    source_priority: float | None = Field(default=None, ge=0.0, le=1.0)


class AuditEntry(BaseModel):
    """One change of a document."""

    id: uuid.UUID
    document_id: uuid.UUID
    actor: str
    action: str
    changes: dict[str, Any]
    at: dt.datetime


async def _locked(conn: Connection, staff: Principal, document_id: uuid.UUID) -> Any:
    row = await repo.lock_for_delete(conn, tenant_id=staff.tenant_id, document_id=document_id)
    if row is None or row["status"] == "deleted":
        raise ProblemError(404, "Not found", f"document {document_id} does not exist")
    return row


async def record_change(
    conn: Connection,
    staff: Principal,
    document_id: uuid.UUID,
    action: str,
    changes: dict[str, Any],
    event: DocumentUpdated | DocumentArchived | DocumentRestored | None = None,
) -> None:
    """The change in the audit log and, announced, in the outbox (the caller's transaction);
    without ``event``, ``documents.updated`` with the changes."""
    await repo.audit(conn, staff=staff, document_id=document_id, action=action, changes=changes)
    if event is None:
        event = DocumentUpdated(
            tenant_id=staff.tenant_id, document_id=document_id, changes=changes,
            updated_by=staff.user_id,
        )  # fmt: skip
    state = await repo.next_revision(conn, document_id)
    await enqueue(conn, event.model_copy(update={"state": state}))


def _json(value: Any) -> Any:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 4)
    return list(value) if isinstance(value, list | tuple) else value


@router.patch("/v1/documents/{document_id}", summary="Change a document's metadata (staff)")
async def patch_document(
    document_id: uuid.UUID, body: DocumentPatch, staff: StaffDep, pool: PoolDep
) -> DocumentView:
    """Search and chat use the new metadata once ingest has copied it to the chunks (from
    the outbox, at commit); nothing is re-embedded."""
    given = {k: getattr(body, k) for k in body.model_fields_set if k in EDITABLE}
    if "title" in given and given["title"] is None:
        raise ProblemError(422, "Unprocessable", "a document keeps a title")
    if "collection" in given and given["collection"] is None:
        raise ProblemError(422, "Unprocessable", "a document belongs to a collection")
    async with pool.acquire() as conn, conn.transaction():
        row = await _locked(conn, staff, document_id)
        changes = {
            field: [_json(row[field]), _json(value)]
            for field, value in given.items()
            if _json(row[field]) != _json(value)
        }
        if changes:
            values = {name: given[name] for name in changes}
            await repo.update_metadata(conn, document_id, values)
            await record_change(conn, staff, document_id, "updated", changes)
        fresh = await repo.get_document(conn, tenant_id=staff.tenant_id, document_id=document_id)
    return document_view(fresh)


async def set_status(
    pool: Pool, staff: Principal, document_id: uuid.UUID, *, to: str, allowed_from: tuple[str, ...]
) -> DocumentView:
    async with pool.acquire() as conn, conn.transaction():
        row = await _locked(conn, staff, document_id)
        if row["status"] != to:
            if row["status"] not in allowed_from:
                raise ProblemError(
                    409, "Conflict",
                    f"document {document_id} is {row['status']}: only a document that is "
                    f"{' or '.join(allowed_from)} can be {to}",
                )  # fmt: skip
            # ingest takes the chunks out of retrieval (or back) when it applies the event
            await repo.set_status(conn, document_id, to)
            action = "archived" if to == "archived" else "restored"
            event: DocumentArchived | DocumentRestored = (
                DocumentArchived(
                    tenant_id=staff.tenant_id, document_id=document_id, archived_by=staff.user_id
                )
                if to == "archived"
                else DocumentRestored(
                    tenant_id=staff.tenant_id, document_id=document_id, restored_by=staff.user_id
                )
            )
            changes = {"status": [row["status"], to]}
            await record_change(conn, staff, document_id, action, changes, event)
        fresh = await repo.get_document(conn, tenant_id=staff.tenant_id, document_id=document_id)
    return document_view(fresh)


@router.post(
    "/v1/documents/{document_id}/archive",
    summary="Take a document out of retrieval (staff; restorable)",
)
async def archive_document(document_id: uuid.UUID, staff: StaffDep, pool: PoolDep) -> DocumentView:
    """Idempotent; 409 unless the document is indexed (or already archived)."""
    return await set_status(pool, staff, document_id, to="archived", allowed_from=("indexed",))


@router.post("/v1/documents/{document_id}/restore", summary="Put an archived document back (staff)")
async def restore_document(document_id: uuid.UUID, staff: StaffDep, pool: PoolDep) -> DocumentView:
    """Idempotent; 409 unless the document is archived or superseded (or indexed)."""
    return await set_status(
        pool, staff, document_id, to="indexed", allowed_from=("archived", "superseded")
    )


class Supersede(BaseModel):
    """The document that replaces this one for students."""

    by: uuid.UUID


@router.post(
    "/v1/documents/{document_id}/supersede",
    summary="Mark a document superseded by another: out of retrieval (staff)",
)
async def supersede_document(
    document_id: uuid.UUID, body: Supersede, staff: StaffDep, pool: PoolDep
) -> DocumentView:
    """The replacement must be another indexed document of the tenant; restore undoes it."""
    return await supersede(pool, staff, document_id, by=body.by)


async def supersede(
    pool: Pool,
    staff: Principal,
    document_id: uuid.UUID,
    *,
    by: uuid.UUID,
    action: str = "superseded",
) -> DocumentView:
    """Take ``document_id`` out of retrieval in favour of ``by`` (audited as ``action``)."""
    if by == document_id:
        raise ProblemError(422, "Unprocessable", "a document cannot supersede itself")
    async with pool.acquire() as conn, conn.transaction():
        row = await _locked(conn, staff, document_id)
        other = await repo.get_document(conn, tenant_id=staff.tenant_id, document_id=by)
        if other is None or other["status"] != "indexed":
            raise ProblemError(
                422, "Unprocessable", f"document {by} is not an indexed document here"
            )
        if row["status"] != "indexed":
            raise ProblemError(
                409, "Conflict", f"document {document_id} is {row['status']}, not indexed"
            )
        await repo.mark_superseded(conn, document_id, by=by)
        changes: dict[str, list[Any]] = {
            "status": ["indexed", "superseded"],
            "superseded_by": [None, str(by)],
        }
        await record_change(conn, staff, document_id, action, changes)
        fresh = await repo.get_document(conn, tenant_id=staff.tenant_id, document_id=document_id)
    return document_view(fresh)


async def document_by_id(pool: Pool, staff: Principal, document_id: uuid.UUID) -> DocumentView:
    """The document as the API shows it (404 when it is not the tenant's)."""
    row = await repo.get_document(pool, tenant_id=staff.tenant_id, document_id=document_id)
    if row is None:
        raise ProblemError(404, "Not found", f"document {document_id} does not exist")
    return document_view(row)


class Version(BaseModel):
    """One version of a document."""

    id: uuid.UUID
    version: int
    status: str
    title: str
    filename: str
    chunk_count: int
    created_at: dt.datetime
    indexed_at: dt.datetime | None


@router.get("/v1/documents/{document_id}/versions", summary="Every version of a document")
async def document_versions(
    document_id: uuid.UUID, staff: StaffDep, pool: PoolDep
) -> list[Version]:
    """The versions of the document this one belongs to, newest first (a new upload of the
    same file is a new version; the replaced one is superseded)."""
    rows = await repo.versions(pool, tenant_id=staff.tenant_id, document_id=document_id)
    if not rows:
        raise ProblemError(404, "Not found", f"document {document_id} does not exist")
    return [Version.model_validate(dict(r)) for r in rows]


@router.get("/v1/documents/{document_id}/audit", summary="Who changed a document, and how")
async def document_audit(
    document_id: uuid.UUID, staff: StaffDep, pool: PoolDep
) -> list[AuditEntry]:
    rows = await repo.audit_entries(pool, tenant_id=staff.tenant_id, document_id=document_id)
    return [AuditEntry.model_validate(dict(r)) for r in rows]
