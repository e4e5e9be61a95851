"""Document routes: upload (streamed), status, list, progress events (SSE), delete."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field, ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from lectern_common.broker import publish_event
from lectern_common.db.types import Connection, Pool
from lectern_common.errors import BadInputError, NotFoundError, UpstreamError
from lectern_common.events import (
    DocumentDeleted,
    DocumentFailed,
    DocumentIndexed,
    DocumentMetadata,
    DocumentUploaded,
    Event,
    Subjects,
)
from lectern_common.filetype import detect_mime_path
from lectern_common.objects import (
    delete_object,
    delete_password,
    fetch_to_file,
    object_name,
    put_file,
    put_password,
)
from lectern_common.outbox import enqueue
from lectern_gateway.auth import Principal, PrincipalDep, StaffDep
from lectern_gateway.classes.membership import may_see_class, student_classes
from lectern_gateway.deps import BrokerDep, PoolDep, SettingsDep
from lectern_gateway.documents import outcomes
from lectern_gateway.documents import repository as repo
from lectern_gateway.documents.fetch import UrlRefused, fetch
from lectern_gateway.documents.uploads import (
    MalformedUpload,
    ReceivedUpload,
    UploadTooLarge,
    receive_upload,
)
from lectern_gateway.documents.views import DocumentView, document_view
from lectern_gateway.problems import NATS_RETRY_AFTER_S, ProblemError

log = logging.getLogger(__name__)

router = APIRouter(tags=["documents"])

#: default source priority by uploader role when the upload does not give one
ROLE_PRIORITY = {"teacher": 0.7, "admin": 0.5}
LIST_FIELDS = ("curriculum_standards", "topic_tags")
STATUS_POLL_S = 5.0


class UploadAccepted(BaseModel):
    """Answer to an accepted upload (202) or a duplicate of an existing one (200)."""

    id: uuid.UUID
    status: str
    version: int
    duplicate: bool = False
    status_url: str
    events_url: str
    document: DocumentView


class DocumentPage(BaseModel):
    """One page of ``GET /v1/documents``."""

    items: list[DocumentView]
    next_cursor: str | None = Field(default=None, description="pass as ?cursor= for the next page")


def _visible(principal: Principal, row: Any, classes: list[str] | None) -> bool:
    """Students never see the assessment collection, nor another class's material."""
    if principal.is_staff:
        return True
    return row["collection"] == "educational" and may_see_class(row["class_id"], classes)


def _split_list(values: list[str]) -> list[str]:
    """Repeated form fields or comma-separated lists, trimmed, order kept, no duplicates."""
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if item and item not in out:
                out.append(item)
    return out


def parse_metadata(fields: dict[str, list[str]], *, filename: str) -> DocumentMetadata:
    """Validate the upload's metadata fields (``ProblemError`` 422 when invalid)."""
    raw: dict[str, Any] = {}
    for name in DocumentMetadata.model_fields:
        values = [v for v in fields.get(name, []) if v.strip()]
        if name in LIST_FIELDS:
            values = fields.get(name, []) + fields.get(f"{name}[]", [])
            if values:
                raw[name] = _split_list(values)
        elif values:
            raw[name] = values[-1].strip()
    raw.setdefault("title", Path(filename).stem or filename)
    try:
        return DocumentMetadata.model_validate(raw)
    except ValidationError as exc:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        raise ProblemError(
            422, "Invalid metadata", "the upload's metadata did not validate", errors=errors
        ) from exc


def _field(fields: dict[str, list[str]], name: str) -> str | None:
    values = [v.strip() for v in fields.get(name, []) if v.strip()]
    return values[-1] if values else None


async def _publish(broker: Any, event: Event, *, headers: dict[str, str] | None = None) -> None:
    await publish_event(broker, event, headers=headers)


def _jetstream(broker: Any) -> Any:
    return broker.config.connection_state.stream


def _form_property(schema: dict[str, Any]) -> dict[str, Any]:
    """A metadata field's JSON schema as a form field: optional, never null."""
    out = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    for variant in schema.get("anyOf", []):
        if variant.get("type") != "null":
            out.update(variant)
    if schema.get("default") not in (None, []):
        out["default"] = schema["default"]
    return out


def upload_form_schema() -> dict[str, Any]:
    """The OpenAPI request body of ``POST /v1/documents``.

    The handler parses the multipart body itself (streamed to disk under the size limit), so
    FastAPI cannot infer it: this documents the file and every metadata field.
    """
    properties: dict[str, Any] = {
        "file": {
            "type": "string", "format": "binary",
            "description": "the document: PDF, DOCX, PPTX, EPUB, HTML, Markdown, plain text or "
            "WebVTT/SRT (the type is read from its bytes, not its name)",
        },
    }  # fmt: skip
    for name, schema in DocumentMetadata.model_json_schema()["properties"].items():
        properties[name] = _form_property(schema)
    properties["title"]["description"] = "default: the file name without its extension"
    for name in LIST_FIELDS:
        properties[name]["description"] = "repeat the field, or separate values with commas"
    properties["password"] = {
        "type": "string", "format": "password",
        "description": "password of an encrypted PDF; kept next to the bytes until ingestion "
        "ends, never put in an event",
    }  # fmt: skip
    properties["replaces"] = {
        "type": "string", "format": "uuid",
        "description": "id of the document this upload is a new version of (same as the "
        "?replaces= query parameter); unset fields keep that version's metadata",
    }  # fmt: skip
    return {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {"type": "object", "required": ["file"], "properties": properties},
                "encoding": {name: {"style": "form", "explode": True} for name in LIST_FIELDS},
            }
        },
    }


@router.post(
    "/v1/documents",
    status_code=202,
    response_model=UploadAccepted,
    summary="Upload a document (multipart: file + metadata); teachers and admins",
    responses={
        200: {"description": "the same bytes were already uploaded in this tenant"},
        413: {"description": "larger than the configured limit"},
        415: {"description": "not a supported file type (decided by its bytes)"},
    },
    openapi_extra={"requestBody": upload_form_schema()},
)
async def upload_document(
    request: Request,
    principal: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    replaces: Annotated[
        uuid.UUID | None, Query(description="id of the document this upload is a new version of")
    ] = None,
) -> JSONResponse:
    """Stream the upload to disk, store it in the object store, and queue it for ingestion."""
    limit = settings.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 1024 * 1024:
        raise _too_large(limit)
    try:
        upload = await receive_upload(
            content_type=request.headers.get("content-type", ""),
            body=request.stream(),
            max_bytes=limit,
        )
    except UploadTooLarge as exc:
        raise _too_large(exc.limit) from exc
    except MalformedUpload as exc:
        raise ProblemError(400, "Bad upload", str(exc), reason="bad_upload") from exc
    source = None
    try:
        if not upload.filename and (url := _field(upload.fields, "url")):
            upload, source = await _fetched_upload(upload, url, settings)
        return await _accept(
            upload=upload, principal=principal, pool=pool, broker=broker, replaces=replaces,
            source=source,
        )  # fmt: skip
    finally:
        upload.discard()


async def _fetched_upload(
    upload: ReceivedUpload, url: str, settings: Any
) -> tuple[ReceivedUpload, dict[str, str]]:
    """The URL's content as the upload's file, and where it came from."""
    upload.discard()
    try:
        got = await fetch(
            url.strip(), max_bytes=settings.max_upload_bytes,
            timeout_s=settings.url_fetch_timeout_s,
            allowed_networks=settings.url_fetch_allowed_networks,
        )  # fmt: skip
    except UrlRefused as exc:
        raise ProblemError(422, "URL refused", exc.message, reason="url_refused") from exc
    except (httpx.HTTPError, TimeoutError) as exc:
        raise ProblemError(
            502, "URL unreachable", f"{url}: {exc!r}", reason="url_unreachable"
        ) from exc
    fields = dict(upload.fields)
    if not _field(fields, "title") and got.page.get("title"):
        fields["title"] = [got.page["title"]]
    source = {"url": got.url, "final_url": got.final_url, "content_type": got.content_type,
              **got.page}  # fmt: skip
    return ReceivedUpload(
        path=got.path, filename=got.filename, size=got.size, sha256=got.sha256, head=got.head,
        fields=fields,
    ), source  # fmt: skip


@router.post(
    "/v1/documents/{document_id}/refetch",
    summary="Fetch a document's URL again: a new version only when the content changed",
    responses={
        200: {"description": "the same bytes as the latest version: nothing new"},
        202: {"description": "changed: a new version, queued for ingestion"},
        422: {"description": "not a document fetched from a URL, or the URL is refused now"},
    },
)
async def refetch_document(
    document_id: uuid.UUID,
    principal: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
) -> JSONResponse:
    row = await _load(pool, principal, document_id)
    source = (row["metadata"] or {}).get("source") or {}
    if not source.get("url"):
        raise ProblemError(
            422, "Unprocessable", f"document {document_id} was not fetched from a URL"
        )
    empty = ReceivedUpload(path=Path(tempfile.mkstemp(prefix="lectern-url-")[1]), filename="",
                           size=0, sha256="", head=b"")  # fmt: skip
    upload, fetched_from = await _fetched_upload(empty, str(source["url"]), settings)
    return await _new_version(
        upload, principal=principal, pool=pool, broker=broker, replaces=document_id,
        source=fetched_from,
    )  # fmt: skip


class ReprocessRequest(BaseModel):
    """Optional body of ``POST /v1/documents/{id}/reprocess``."""

    password: str | None = Field(
        default=None, description="the PDF's password, when it has one (not kept after indexing)"
    )


@router.post(
    "/v1/documents/{document_id}/reprocess",
    status_code=202,
    response_model=UploadAccepted,
    summary="Index a document's stored file again with the current extraction and chunking: "
    "a new version; the old one answers until it is indexed",
    responses={
        404: {"description": "no such document, or its file is no longer stored"},
        409: {"description": "not the latest version, or still being indexed"},
    },
)
async def reprocess_document(
    document_id: uuid.UUID,
    principal: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    body: ReprocessRequest | None = None,
) -> JSONResponse:
    """Re-chunk one document (after the operator changed the chunking settings or the
    extractors improved): its stored bytes become a new version through the ordinary upload
    path. Chunks whose embedded text is unchanged keep their vectors; a failure leaves the
    current version in place."""
    row = await _load(pool, principal, document_id)
    if row["status"] in ("pending", "processing"):
        raise ProblemError(
            409, "Conflict", f"document {document_id} is still being indexed",
            reason="in_progress",
        )  # fmt: skip
    if row["deleted_at"] is not None or not row["object_name"]:
        raise ProblemError(404, "Not found", f"document {document_id} has no stored file")
    fields: dict[str, list[str]] = {}
    if body is not None and body.password:
        fields["password"] = [body.password]
    path, size = await stored_copy(broker, row)
    upload = ReceivedUpload(path=path, filename=row["filename"], size=size,
                            sha256=row["file_sha256"], head=b"", fields=fields)  # fmt: skip
    return await _new_version(
        upload, principal=principal, pool=pool, broker=broker, replaces=document_id,
        source=(row["metadata"] or {}).get("source"), reprocess=True,
    )  # fmt: skip


async def _new_version(
    upload: ReceivedUpload,
    *,
    principal: Principal,
    pool: Pool,
    broker: Any,
    replaces: uuid.UUID,
    source: dict[str, str] | None,
    reprocess: bool = False,
) -> JSONResponse:
    """A document's next version from ``upload`` (refetched or reprocessed); the upload's
    temporary file is removed whatever the outcome."""
    try:
        return await _accept(
            upload=upload, principal=principal, pool=pool, broker=broker, replaces=replaces,
            source=source, reprocess=reprocess,
        )  # fmt: skip
    finally:
        upload.discard()


def _too_large(limit: int) -> ProblemError:
    return ProblemError(
        413, "Upload too large", f"the file is larger than the limit of {limit} bytes",
        reason="too_large", limit_bytes=limit,
    )  # fmt: skip


async def _accept(
    *,
    upload: Any,
    principal: Principal,
    pool: Pool,
    broker: Any,
    replaces: uuid.UUID | None,
    source: dict[str, str] | None = None,
    reprocess: bool = False,
) -> JSONResponse:
    mime = _upload_type(upload)
    fields = upload.fields
    if replaces is None and (raw_replaces := _field(fields, "replaces")):
        try:
            replaces = uuid.UUID(raw_replaces)
        except ValueError as exc:
            raise ProblemError(422, "Invalid metadata", "replaces is not a document id") from exc
    password = _field(fields, "password")
    given = {k for k, v in fields.items() if any(x.strip() for x in v)}
    metadata = parse_metadata(fields, filename=upload.filename)
    previous, metadata = await _previous_version(
        pool, principal, replaces=replaces, metadata=metadata, given=given
    )

    async with pool.acquire() as conn:
        existing = await repo.find_by_file_hash(
            conn, tenant_id=principal.tenant_id, file_sha256=upload.sha256
        )
        if existing is not None and not _is_replaced(existing, replaces, reprocess):
            return await _duplicate(conn, existing, principal)

    document_id = uuid.uuid4()
    version = previous["version"] + 1 if previous is not None else 1
    name = object_name(document_id, version)
    js = _jetstream(broker)
    await put_file(js, name=name, path=upload.path)
    if password is not None:
        # next to the bytes, not in documents.uploaded (which stays in the stream)
        await put_password(js, name=name, password=password)
    new, event = _records(
        upload=upload, principal=principal, mime=mime, metadata=metadata, source=source,
        document_id=document_id, version=version, replaces=replaces,
        has_password=password is not None,
    )  # fmt: skip
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_file_hash(conn, tenant_id=principal.tenant_id, file_sha256=upload.sha256)
        existing = await repo.find_by_file_hash(
            conn, tenant_id=principal.tenant_id, file_sha256=upload.sha256
        )
        if existing is not None and _is_replaced(existing, replaces, reprocess):
            # one re-processing at a time: a second request joins the one under way
            existing = await repo.pending_version(conn, document_id=existing["id"])
        row = None
        if existing is None:
            row = await repo.insert_document(conn, new)
            if reprocess and replaces is not None:
                await repo.audit(
                    conn, staff=principal, document_id=replaces, action="reprocessed",
                    changes={"version": [version - 1, version], "new_document_id": [
                        None, str(document_id)]},
                )  # fmt: skip
            # the outbox: documents.uploaded is published once this row is committed
            await enqueue(conn, event)
    if existing is not None:
        await _drop_stored(js, name)
        async with pool.acquire() as conn:
            return await _duplicate(conn, existing, principal)
    view = document_view(row)
    body = UploadAccepted(
        id=document_id, status=view.status, version=version, status_url=view.status_url,
        events_url=view.events_url, document=view,
    )  # fmt: skip
    return JSONResponse(
        body.model_dump(mode="json"), status_code=202, headers={"Location": view.status_url}
    )


def _upload_type(upload: Any) -> str:
    """The upload's MIME type, read from its bytes: 400 for an empty file or a NUL character
    in its name or form fields, 415 for a type Lectern does not read."""
    try:
        mime = detect_mime_path(upload.path, upload.filename)
    except BadInputError as exc:
        if exc.reason == "empty_file":
            raise ProblemError(
                400, "Empty file", f"{upload.filename}: {exc.message}", reason="empty_file"
            ) from exc
        raise ProblemError(
            415, "Unsupported media type",
            f"{upload.filename}: not a supported document type (PDF, DOCX, PPTX, EPUB, HTML, "
            "Markdown, text, WebVTT/SRT, JATS XML, PNG/JPEG page images); the type is read "
            "from the file's bytes",
            reason="unsupported_type",
        ) from exc  # fmt: skip
    fields = upload.fields
    if "\x00" in upload.filename or any("\x00" in v for vs in fields.values() for v in vs):
        raise ProblemError(
            400, "Bad upload", "a NUL character in the file name or a form field",
            reason="bad_upload",
        )  # fmt: skip
    return mime


async def _previous_version(
    pool: Pool,
    principal: Principal,
    *,
    replaces: uuid.UUID | None,
    metadata: DocumentMetadata,
    given: set[str],
) -> tuple[Any, DocumentMetadata]:
    """The version an upload replaces (404 when absent, 409 when not the latest) and the
    metadata the new version inherits from it."""
    if replaces is None:
        return None, metadata
    async with pool.acquire() as conn:
        previous = await repo.get_document(
            conn, tenant_id=principal.tenant_id, document_id=replaces
        )
    if previous is None:
        raise ProblemError(404, "Not found", f"document {replaces} does not exist")
    if previous["status"] in ("deleted", "superseded"):
        raise ProblemError(
            409, "Conflict", f"document {replaces} is {previous['status']}; "
            "replace its latest version instead", reason="not_latest_version",
        )  # fmt: skip
    return previous, _inherit(metadata, previous, given)


def _records(
    *,
    upload: Any,
    principal: Principal,
    mime: str,
    metadata: DocumentMetadata,
    source: dict[str, str] | None,
    document_id: uuid.UUID,
    version: int,
    replaces: uuid.UUID | None,
    has_password: bool,
) -> tuple[repo.NewDocument, DocumentUploaded]:
    """The new version's row and its ``documents.uploaded`` event."""
    name = object_name(document_id, version)
    priority = metadata.source_priority
    if priority is None:
        priority = ROLE_PRIORITY.get(principal.role, 0.5)
    new = repo.NewDocument(
        id=document_id, tenant_id=principal.tenant_id, title=metadata.title or upload.filename,
        filename=upload.filename, mime_type=mime, size_bytes=upload.size,
        file_sha256=upload.sha256, subject=metadata.subject, grade_level=metadata.grade_level,
        module_tag=metadata.module_tag, class_id=metadata.class_id,
        content_type=metadata.content_type, language=metadata.language,
        collection=metadata.collection, curriculum_standards=metadata.curriculum_standards,
        topic_tags=metadata.topic_tags, source_priority=priority,
        freshness_date=metadata.freshness_date, version=version,
        previous_version_id=replaces, object_name=name, uploaded_by=principal.user_id,
        uploader_role=principal.role,
        metadata={**metadata.model_dump(mode="json"), **({"source": source} if source else {})},
    )  # fmt: skip
    event = DocumentUploaded(
        tenant_id=principal.tenant_id, document_id=document_id, version=version,
        object_name=name, filename=upload.filename, mime_type=mime, size_bytes=upload.size,
        file_sha256=upload.sha256, uploaded_by=principal.user_id,
        uploader_role=principal.role,
        metadata=metadata.model_copy(update={"source_priority": priority}),
        replaces_document_id=replaces, has_password=has_password, source=source,
    )  # fmt: skip
    return new, event


async def _drop_stored(js: Any, name: str) -> None:
    """Remove the bytes of an upload found to be a duplicate once stored."""
    try:
        await remove_stored_objects(js, object_name=name)
    except UpstreamError as exc:
        # NATS unavailable: the duplicate is answered all the same, and the garbage
        # collector removes bytes no document names (lectern_common.gc)
        log.warning("bytes of duplicate upload %s left for the collector: %s", name, exc)


def _is_replaced(existing: Any, replaces: uuid.UUID | None, reprocess: bool) -> bool:
    """Re-processing repeats the bytes of the version it replaces: not a duplicate of it."""
    return reprocess and existing["id"] == replaces


def _inherit(metadata: DocumentMetadata, previous: Any, given: set[str]) -> DocumentMetadata:
    """A new version keeps the previous version's metadata unless the upload sets it."""
    update: dict[str, Any] = {}
    for name in DocumentMetadata.model_fields:
        if name in given or f"{name}[]" in given or name == "source_priority":
            continue
        value = previous[name]
        if name in LIST_FIELDS:
            value = list(value)
        update[name] = value
    if "source_priority" not in given:
        update["source_priority"] = previous["source_priority"]
    return metadata.model_copy(update=update)


async def _duplicate(conn: Connection, existing: Any, principal: Principal) -> JSONResponse:
    row = await repo.add_co_owner(conn, document_id=existing["id"], user_id=principal.user_id)
    view = document_view(row)
    body = UploadAccepted(
        id=view.id, status=view.status, version=view.version, duplicate=True,
        status_url=view.status_url, events_url=view.events_url, document=view,
    )  # fmt: skip
    return JSONResponse(
        body.model_dump(mode="json"), status_code=200, headers={"Location": view.status_url}
    )


async def _load(pool: Pool, principal: Principal, document_id: uuid.UUID) -> Any:
    async with pool.acquire() as conn:
        row = await repo.get_document(conn, tenant_id=principal.tenant_id, document_id=document_id)
    if row is None or not _visible(principal, row, await student_classes(pool, principal)):
        raise ProblemError(404, "Not found", f"document {document_id} does not exist")
    return row


@router.get(
    "/v1/documents/{document_id}",
    response_model=DocumentView,
    summary="A document's status, counts and error",
)
async def get_document(
    document_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep
) -> DocumentView:
    """One document of the caller's tenant."""
    return document_view(await _load(pool, principal, document_id))


@router.get(
    "/v1/documents/{document_id}/file",
    summary="The original file (inline; a PDF opens at a page with #page=N)",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the bytes"}},
)
async def document_file(
    document_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep, broker: BrokerDep
) -> FileResponse:
    """The uploaded bytes, with the visibility of the document's chunks: students only an
    indexed document of the educational collection; staff any document still stored."""
    row = await _load(pool, principal, document_id)
    gone = row["deleted_at"] is not None or not row["object_name"]
    if gone or (not principal.is_staff and row["status"] != "indexed"):
        raise ProblemError(404, "Not found", f"document {document_id} has no file to serve")
    path, _ = await stored_copy(broker, row)
    return FileResponse(
        path, media_type=row["mime_type"], filename=row["filename"],
        content_disposition_type="inline",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )  # fmt: skip


async def stored_copy(broker: Any, row: Any) -> tuple[Path, int]:
    """The document's stored bytes in a temporary file (the caller removes it) and their
    size; 404 when the object store no longer holds them, 503 when it cannot answer."""
    fd, name = await asyncio.to_thread(tempfile.mkstemp, prefix="lectern-file-")
    os.close(fd)
    path = Path(name)
    try:
        size = await fetch_to_file(_jetstream(broker), name=row["object_name"], path=path)
    except NotFoundError as exc:
        await asyncio.to_thread(path.unlink, missing_ok=True)
        raise ProblemError(404, "Not found", f"the file of {row['id']} is not stored") from exc
    except Exception:
        # NATS unavailable: 503 with its reason and Retry-After (problems.unavailable)
        await asyncio.to_thread(path.unlink, missing_ok=True)
        raise
    return path, size


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor.encode()).decode())
        return datetime.fromisoformat(raw[0]), uuid.UUID(raw[1])
    except (ValueError, TypeError, LookupError) as exc:
        raise ProblemError(400, "Bad cursor", "the cursor is not one this API gave") from exc


def _encode_cursor(created_at: datetime, document_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(document_id)])
    return base64.urlsafe_b64encode(raw.encode()).decode()


Status = Literal[
    "pending", "processing", "indexed", "duplicate", "failed", "superseded", "archived", "deleted"
]


@router.get(
    "/v1/documents", response_model=DocumentPage, summary="The tenant's documents, newest first"
)
async def list_documents(
    principal: PrincipalDep,
    pool: PoolDep,
    status: Status | None = None,
    subject: str | None = None,
    collection: Literal["educational", "assessment"] | None = None,
    module_tag: str | None = None,
    class_id: str | None = None,
    content_type: str | None = None,
    language: str | None = None,
    grade_level: Annotated[int | None, Query(ge=0, le=16)] = None,
    filename: Annotated[str | None, Query(description="exact file name")] = None,
    title: Annotated[str | None, Query(description="exact title")] = None,
    mine: Annotated[bool, Query(description="only documents the caller uploaded")] = False,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> DocumentPage:
    """Filter and paginate (``next_cursor``); students see the educational collection only."""
    if not principal.is_staff:
        if collection == "assessment":
            return DocumentPage(items=[])
        collection = "educational"
        if status is None:
            status = "indexed"
    filters = repo.ListFilters(
        status=status, subject=subject, collection=collection, module_tag=module_tag,
        class_id=class_id, content_type=content_type, language=language,
        grade_level=grade_level, filename=filename, title=title,
        uploaded_by=principal.user_id if mine else None,
        visible_classes=await student_classes(pool, principal),
    )  # fmt: skip
    after = _decode_cursor(cursor) if cursor else None
    async with pool.acquire() as conn:
        rows = await repo.list_documents(
            conn, tenant_id=principal.tenant_id, filters=filters, limit=limit + 1, after=after
        )
    items = [document_view(r) for r in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = _encode_cursor(last["created_at"], last["id"])
    return DocumentPage(items=items, next_cursor=next_cursor)


def _final_event(view: DocumentView) -> ServerSentEvent | None:
    if view.status not in repo.FINAL_STATUSES:
        return None
    return ServerSentEvent(data=view.model_dump_json(), event=view.status)


@router.get(
    "/v1/documents/{document_id}/events",
    summary="Server-Sent Events: status, progress (stage, pages done of total), then the outcome",
    response_class=EventSourceResponse,
)
async def document_events(
    document_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep, broker: BrokerDep
) -> EventSourceResponse:
    """``status``, ``progress`` while working, then indexed, duplicate, failed or deleted."""
    await _load(pool, principal, document_id)
    return EventSourceResponse(
        _event_stream(document_id=document_id, principal=principal, pool=pool, broker=broker),
        ping=15,
    )


async def _event_stream(
    *, document_id: uuid.UUID, principal: Principal, pool: Pool, broker: Any
) -> AsyncIterator[ServerSentEvent]:
    nc = broker.config.connection_state.connection
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    wanted = str(document_id)

    async def on_message(msg: Any) -> None:
        try:
            data = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(data, dict) and data.get("document_id") == wanted:
            queue.put_nowait((msg.subject, data))

    subjects = (Subjects.DOCUMENTS_PROGRESS, Subjects.DOCUMENTS_INDEXED,
                Subjects.DOCUMENTS_FAILED, Subjects.DOCUMENTS_DELETED)  # fmt: skip
    # subscribe before reading the status so an outcome between the two is not missed
    subscriptions = [await nc.subscribe(s, cb=on_message) for s in subjects]
    try:
        view = document_view(await _load(pool, principal, document_id))
        yield ServerSentEvent(data=view.model_dump_json(), event="status")
        final = _final_event(view)
        if final is not None:
            yield final
            return
        while True:
            try:  # asyncio.timeout, not wait_for: see ``OutboxRelay.run``
                async with asyncio.timeout(STATUS_POLL_S):
                    subject, data = await queue.get()
            except TimeoutError:
                view = document_view(await _load(pool, principal, document_id))
                final = _final_event(view)
                if final is not None:
                    yield final
                    return
                continue
            if subject == Subjects.DOCUMENTS_PROGRESS:
                progress = {k: data.get(k) for k in ("stage", "done", "total", "unit")}
                yield ServerSentEvent(data=json.dumps(progress), event="progress")
                continue
            await _record_outcome(pool, subject, data)
            view = document_view(await _load(pool, principal, document_id))
            final = _final_event(view)
            if final is not None:
                yield final
                return
    finally:
        for subscription in subscriptions:
            await subscription.unsubscribe()


async def _record_outcome(pool: Pool, subject: str, data: dict[str, Any]) -> None:
    """Write an outcome the stream saw to the row now (idempotent), rather than wait for the
    outcome consumer to (``documents.outcomes``)."""
    try:
        if subject == Subjects.DOCUMENTS_INDEXED:
            await outcomes.apply(pool, DocumentIndexed.model_validate(data))
        elif subject == Subjects.DOCUMENTS_FAILED:
            await outcomes.apply(pool, DocumentFailed.model_validate(data))
    except ValidationError as exc:
        log.warning("malformed %s on the status stream: %s", subject, exc)


@router.delete(
    "/v1/documents/{document_id}",
    response_model=DocumentView,
    summary="Delete a document: its chunks leave retrieval and its bytes are removed",
    responses={
        200: {"description": "deleted (also when it already was: the clean-up is repeated)"},
        503: {"description": "it left retrieval, but the clean-up failed: repeat the DELETE"},
    },
)
async def delete_document(
    document_id: uuid.UUID, principal: StaffDep, pool: PoolDep, broker: BrokerDep
) -> DocumentView:
    """Mark the document deleted with ``documents.deleted`` in the outbox (one transaction:
    ingest deletes the chunks when it applies the event), then remove the stored bytes and
    publish the event at once too.

    Idempotent and repairing: a repeated DELETE of a deleted document removes the bytes again
    (if still there) and republishes the same event (same ``event_id``, so JetStream drops the
    copy within its duplicate window and consumers after it), so a failure after the commit is
    fixed by retrying the request.
    """
    async with pool.acquire() as conn, conn.transaction():
        locked = await repo.lock_for_delete(
            conn, tenant_id=principal.tenant_id, document_id=document_id
        )
        if locked is None:
            raise ProblemError(404, "Not found", f"document {document_id} does not exist")
        row = locked
        if locked["status"] != "deleted":
            row = await repo.mark_deleted(
                conn, document_id=document_id, deleted_by=principal.user_id
            )
            await enqueue(conn, deleted_event(row))
    try:
        await finish_deletion(broker=broker, row=row)
    except Exception as exc:
        log.warning("clean-up of deleted document %s failed: %s", document_id, exc)
        raise ProblemError(
            503, "Deletion incomplete",
            f"document {document_id} left retrieval, but removing its stored bytes or "
            f"announcing documents.deleted failed ({exc}); repeat the DELETE to finish",
            reason="cleanup_pending", headers={"Retry-After": str(NATS_RETRY_AFTER_S)},
        ) from exc  # fmt: skip
    return document_view(row)


def deleted_event(row: Any) -> DocumentDeleted:
    """The ``documents.deleted`` event of a deleted row: the same on every publication."""
    return DocumentDeleted(
        event_id=uuid.uuid5(row["id"], "lectern.documents.deleted"),
        occurred_at=row["deleted_at"], tenant_id=row["tenant_id"], document_id=row["id"],
        deleted_by=row["deleted_by"] or "unknown",
    )  # fmt: skip


async def remove_stored_objects(js: Any, *, object_name: str) -> None:
    """Remove a document's bytes and any PDF password left with them (absent is fine)."""
    await delete_object(js, name=object_name)
    await delete_password(js, name=object_name)


async def finish_deletion(*, broker: Any, row: Any) -> None:
    """The steps of a deletion after its commit; each is safe to repeat.

    ``Nats-Msg-Id`` lets JetStream drop a republication within its duplicate window; after
    that, consumers dedupe on the stable ``event_id``.
    """
    if row["object_name"]:
        await remove_stored_objects(_jetstream(broker), object_name=row["object_name"])
    event = deleted_event(row)
    await _publish(broker, event, headers={"Nats-Msg-Id": str(event.event_id)})
