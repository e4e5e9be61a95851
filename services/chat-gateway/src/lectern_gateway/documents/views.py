"""A document as clients see it (its row's public view), shared by the routes that show one."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, Field


class DocumentError(BaseModel):
    """Why a document failed."""

    stage: str | None
    reason: str | None
    message: str | None


class DocumentView(BaseModel):
    """A document as clients see it."""

    id: uuid.UUID
    title: str
    filename: str
    mime_type: str
    source: dict[str, str] | None = Field(
        default=None,
        description="a document fetched from a URL: url, final_url, content_type and what "
        "the page states (canonical_url, title, author, date)",
    )
    size_bytes: int
    status: str
    version: int
    previous_version_id: uuid.UUID | None
    page_count: int | None
    skipped_pages: int
    chunk_count: int
    qa_count: int
    language: str | None
    enriched: bool
    enrichment_note: str | None
    near_duplicate_of: uuid.UUID | None
    near_duplicate_score: float | None
    duplicate_of: uuid.UUID | None = Field(
        description="status duplicate: the indexed document with the same text (nothing of "
        "this one was indexed again; its uploader became a co-owner there)"
    )
    error: DocumentError | None
    attempts: int
    subject: str | None
    grade_level: int | None
    module_tag: str | None
    class_id: str | None
    content_type: str | None
    collection: str
    curriculum_standards: list[str]
    topic_tags: list[str]
    source_priority: float | None
    freshness_date: date | None
    file_sha256: str
    uploaded_by: str
    co_owners: list[str]
    created_at: datetime
    updated_at: datetime
    indexed_at: datetime | None
    status_url: str
    events_url: str


def urls(document_id: uuid.UUID) -> tuple[str, str]:
    return f"/v1/documents/{document_id}", f"/v1/documents/{document_id}/events"


def document_view(row: Any) -> DocumentView:
    """The public view of a documents row."""
    status_url, events_url = urls(row["id"])
    error = None
    if row["status"] == "failed" or row["error_reason"]:
        error = DocumentError(
            stage=row["error_stage"], reason=row["error_reason"], message=row["error_message"]
        )
    return DocumentView(
        id=row["id"], title=row["title"], filename=row["filename"], mime_type=row["mime_type"],
        size_bytes=row["size_bytes"], status=row["status"], version=row["version"],
        previous_version_id=row["previous_version_id"], page_count=row["page_count"],
        skipped_pages=row["skipped_pages"], chunk_count=row["chunk_count"],
        qa_count=row["qa_count"], language=row["language"], enriched=row["enriched"],
        enrichment_note=row["enrichment_note"], near_duplicate_of=row["near_duplicate_of"],
        near_duplicate_score=row["near_duplicate_score"], duplicate_of=row["duplicate_of"],
        error=error, attempts=row["attempts"],
        subject=row["subject"], grade_level=row["grade_level"], module_tag=row["module_tag"],
        class_id=row["class_id"], content_type=row["content_type"],
        collection=row["collection"], curriculum_standards=list(row["curriculum_standards"]),
        topic_tags=list(row["topic_tags"]), source_priority=row["source_priority"],
        freshness_date=row["freshness_date"], file_sha256=row["file_sha256"],
        uploaded_by=row["uploaded_by"], co_owners=list(row["co_owners"]),
        created_at=row["created_at"], updated_at=row["updated_at"],
        indexed_at=row["indexed_at"], status_url=status_url, events_url=events_url,
        source=(row["metadata"] or {}).get("source"),
    )  # fmt: skip
