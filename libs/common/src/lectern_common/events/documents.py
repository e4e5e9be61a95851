"""Document lifecycle events: uploaded -> progress* -> indexed | failed (-> conflicts);
deleted."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from lectern_common.events.base import (
    Event,
    Reply,
    Request,
    Subjects,
    register_event,
    register_request,
)

Collection = Literal["educational", "assessment"]


class IngestStage(StrEnum):
    """Where in the pipeline a document is (or failed)."""

    FETCH = "fetch"
    EXTRACT = "extract"
    CHUNK = "chunk"
    ENRICH = "enrich"
    EMBED = "embed"
    STORE = "store"


class FailureReason(StrEnum):
    """Machine-readable reasons carried by ``documents.failed``."""

    OBJECT_MISSING = "object_missing"
    UNSUPPORTED_TYPE = "unsupported_type"
    EMPTY_FILE = "empty_file"
    ENCRYPTED = "encrypted"
    WRONG_PASSWORD = "wrong_password"  # noqa: S105
    CORRUPT = "corrupt"
    NO_TEXT = "no_text"
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    TOO_MANY_DELIVERIES = "too_many_deliveries"
    EMBEDDING_FAILED = "embedding_failed"
    STORE_FAILED = "store_failed"
    INTERNAL = "internal"


MAX_LABELS = 50
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]


class DocumentMetadata(BaseModel):
    """Teacher-supplied metadata; copied onto every chunk as filter columns."""

    model_config = ConfigDict(extra="ignore")

    title: str | None = Field(default=None, max_length=500)
    subject: str | None = Field(default=None, max_length=100)
    grade_level: int | None = Field(default=None, ge=0, le=16)
    module_tag: str | None = Field(default=None, max_length=100)
    class_id: str | None = Field(default=None, max_length=100)
    curriculum_standards: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    topic_tags: list[Label] = Field(default_factory=list, max_length=MAX_LABELS)
    content_type: str | None = Field(
        default=None, max_length=50, description="textbook, slides, notes, worksheet, video ..."
    )
    language: str | None = Field(
        default=None, max_length=16, description="ISO 639-1; detected if unset"
    )
    collection: Collection = "educational"
    source_priority: float | None = Field(
        default=None, ge=0.0, le=1.0, description="1.0 teacher's own .. 0.1 web; derived if unset"
    )
    freshness_date: date | None = None


@register_event
class DocumentUploaded(Event):
    """A file was accepted and stored in the object store; ingest should index it."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_UPLOADED

    document_id: uuid.UUID
    version: int = Field(ge=1)
    object_name: str = Field(description="key in the lectern-documents object store bucket")
    filename: str
    mime_type: str = Field(description="type decided from the bytes, not the extension")
    size_bytes: int = Field(ge=0)
    file_sha256: str
    uploaded_by: str
    uploader_role: str = "teacher"
    metadata: DocumentMetadata = Field(default_factory=DocumentMetadata)
    replaces_document_id: uuid.UUID | None = Field(
        default=None, description="previous version whose chunks this one replaces atomically"
    )
    source: dict[str, str] | None = Field(
        default=None,
        description="where a fetched document came from (its URL ...), kept with its metadata",
    )
    has_password: bool = Field(
        default=False,
        description=(
            "a password for an encrypted PDF was given; it is stored next to the bytes in the "
            "object store (not in this event) and removed once ingestion finishes"
        ),
    )
    pdf_password: str | None = Field(
        default=None,
        repr=False,
        exclude_if=lambda value: value is None,  # absent from new payloads, not null
        # marked in the schema only: pydantic's deprecated= warns on every read by the worker
        json_schema_extra={"deprecated": True},
        description="deprecated: never sent any more (see has_password); still honoured if set",
    )


@register_event
class DocumentProgress(Event):
    """Work is under way; drives progress bars. Short-lived (limits stream, small max age)."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_PROGRESS

    document_id: uuid.UUID
    stage: IngestStage
    done: int = Field(ge=0)
    total: int = Field(ge=0)
    unit: Literal["pages", "chunks", "units"] = "pages"


def outcome_event_id(document_id: uuid.UUID, version: int, outcome: str) -> uuid.UUID:
    """The id of a document version's outcome event (``indexed`` or ``failed``).

    Derived, not random: a worker that crashes after storing the outcome and before its
    acknowledgement republishes it on redelivery with the same id, so JetStream's duplicate
    window drops the copy and a consumer that remembers event ids can drop it later.
    """
    return uuid.uuid5(document_id, f"lectern.documents.{outcome}:{version}")


@register_event
class DocumentIndexed(Event):
    """Every chunk of the document is stored and searchable (or it duplicates one that is).

    Published once per version; a republished copy carries the same ``event_id``.
    """

    subject: ClassVar[str] = Subjects.DOCUMENTS_INDEXED

    document_id: uuid.UUID
    version: int
    page_count: int
    skipped_pages: int = 0
    chunk_count: int
    qa_count: int = 0
    language: str | None = None
    enriched: bool = False
    near_duplicate_of: uuid.UUID | None = None
    duplicate_of: uuid.UUID | None = Field(
        default=None,
        description=(
            "set when the document's cleaned text equals this already indexed document of the "
            "tenant: nothing was indexed a second time (chunk_count 0), the text is searchable "
            "through that document, and the uploader became its co-owner"
        ),
    )
    duration_ms: float
    title: str | None = Field(
        default=None, description="the document's own title, found in its text (else unset)"
    )
    ts_config: str | None = Field(default=None, description="the text search configuration")
    content_sha256: str | None = Field(default=None, description="hash of the cleaned text")
    simhash: int | None = Field(default=None, description="SimHash of the cleaned text")
    near_duplicate_score: float | None = None
    enrichment_note: str | None = None


@register_event
class DocumentFailed(Event):
    """The document could not be indexed; nothing of it is searchable.

    A republished copy (same document version) carries the same ``event_id``.
    """

    subject: ClassVar[str] = Subjects.DOCUMENTS_FAILED

    document_id: uuid.UUID
    stage: IngestStage
    reason: FailureReason
    message: str = Field(description="what a person can do about it")
    attempts: int = 1


class DocumentState(BaseModel):
    """The gateway's row of a document after a change: what ingest keeps of it (the columns
    its chunks carry, its title, its lifecycle status), with the row's ``revision``. Ingest
    applies a snapshot only when its revision is newer than the one it holds, so events
    that arrive late, twice or out of order leave the newest state in place."""

    model_config = ConfigDict(extra="ignore")

    revision: int = Field(ge=0, description="counts the row's changes; newer wins")
    status: str = Field(description="the row's status after the change")
    title: str
    subject: str | None = None
    grade_level: int | None = None
    module_tag: str | None = None
    class_id: str | None = None
    content_type: str | None = None
    collection: Collection = "educational"
    curriculum_standards: list[str] = Field(default_factory=list)
    topic_tags: list[str] = Field(default_factory=list)
    source_priority: float | None = None
    freshness_date: date | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


#: the ``DocumentState`` fields that are columns of a document (``revision`` aside)
STATE_COLUMNS = tuple(name for name in DocumentState.model_fields if name != "revision")


class _Changed(Event):
    """A change the gateway made to a document, with its row's state after it."""

    state: DocumentState | None = Field(
        default=None, description="the row after the change (absent from older publishers)"
    )


@register_event
class DocumentDeleted(_Changed):
    """The document was deleted: its bytes are removed and ingest deletes its chunks.

    A repeated DELETE republishes the same event (same ``event_id``, derived from the document
    id), so consumers can drop the copies.
    """

    subject: ClassVar[str] = Subjects.DOCUMENTS_DELETED

    document_id: uuid.UUID
    deleted_by: str


@register_event
class DocumentUpdated(_Changed):
    """A teacher changed a document's metadata (or superseded it: ``changes`` names
    ``status``); ingest copies the columns chunks carry onto them, and search and chat use
    them from then on (nothing is re-embedded: the indexed text did not change)."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_UPDATED

    document_id: uuid.UUID
    changes: dict[str, list[Any]] = Field(description="field -> [old value, new value]")
    updated_by: str


@register_event
class DocumentArchived(_Changed):
    """The document was archived; ingest takes its chunks out of retrieval (they are kept,
    for a restore)."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_ARCHIVED

    document_id: uuid.UUID
    archived_by: str


@register_event
class DocumentRestored(_Changed):
    """An archived document was restored; ingest puts its chunks back in retrieval."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_RESTORED

    document_id: uuid.UUID
    restored_by: str


class ConflictPair(BaseModel):
    """A chunk of a newly indexed document and a near neighbour in another document of the
    tenant that state the same thing with different numbers, or one negating the other."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    chunk_a: uuid.UUID = Field(description="the newly indexed document's chunk")
    chunk_b: uuid.UUID = Field(description="its neighbour in another document")
    document_a: uuid.UUID
    document_b: uuid.UUID
    kind: Literal["number", "negation"]
    statement_a: str = Field(description="the sentence of chunk_a")
    statement_b: str = Field(description="the sentence of chunk_b it disagrees with")
    detail: str = Field(description="what differs, e.g. '90 °C in one, 100 °C in the other'")
    similarity: float = Field(description="cosine similarity of the two chunks")


#: pairs in one ``documents.conflicts`` event: a statement is at most 60 words, so 50 pairs
#: stay well under NATS's 1 MB payload limit; more pairs go in more events
MAX_CONFLICT_PAIRS = 50


@register_event
class ConflictsFound(Event):
    """Ingest compared newly indexed documents with the tenant's library and found these
    disagreeing pairs; the gateway's review queue (``source_conflicts``) records each pair
    once, so a redelivered or repeated event adds nothing.

    The ``event_id`` is derived from the pairs: the same findings carry the same id."""

    subject: ClassVar[str] = Subjects.DOCUMENTS_CONFLICTS

    pairs: list[ConflictPair] = Field(min_length=1, max_length=MAX_CONFLICT_PAIRS)


def conflicts_found(tenant_id: str, pairs: Sequence[ConflictPair]) -> list[ConflictsFound]:
    """The events announcing a tenant's ``pairs``, ``MAX_CONFLICT_PAIRS`` an event, each with
    an id derived from its pairs (in chunk order, so the same findings in any order give the
    same events; none for no pairs)."""
    ordered = sorted(pairs, key=lambda p: (p.chunk_a, p.chunk_b))
    events = []
    for start in range(0, len(ordered), MAX_CONFLICT_PAIRS):
        batch = ordered[start : start + MAX_CONFLICT_PAIRS]
        key = ";".join(f"{p.chunk_a}:{p.chunk_b}" for p in batch)
        event_id = uuid.uuid5(batch[0].chunk_a, f"lectern.documents.conflicts:{key}")
        events.append(ConflictsFound(event_id=event_id, tenant_id=tenant_id, pairs=batch))
    return events


class SectionStandards(BaseModel):
    """Standards of one section: its chunks whose heading path starts with ``path``."""

    path: list[str] = Field(min_length=1, max_length=20)
    standards: list[str] = Field(max_length=200)


class ChunkCurriculumRequest(Request):
    """Set the curriculum standards of a document's chunks (ingest owns ``chunks``): every
    chunk gets ``document``, then each section's chunks also get that section's. Replaces
    what the chunks had, so a repeated request changes nothing more."""

    subject: ClassVar[str] = Subjects.CHUNKS_CURRICULUM

    document_id: uuid.UUID
    document: list[str] = Field(default_factory=list, max_length=200)
    sections: list[SectionStandards] = Field(default_factory=list, max_length=500)


class ChunkCurriculumReply(Reply):
    """How many chunks of the document were updated."""

    updated: int = 0


register_request(ChunkCurriculumRequest, ChunkCurriculumReply)
