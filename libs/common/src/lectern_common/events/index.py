"""Reads of the index the retriever answers for the other services (issue 61): the
retriever owns every read of ``chunks`` and the BM25 statistics, as ingest owns their writes,
so a change to the chunk schema is made in those two services only."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from lectern_common.events.base import Reply, Request, Subjects, register_request
from lectern_common.events.documents import SectionStandards
from lectern_common.events.retrieval import CollectionName, ScopeFilter


def _educational() -> list[CollectionName]:
    return ["educational"]


class ChunkVisibility(BaseModel):
    """What the caller may see: chunks of live (indexed) documents in ``collections``; with
    ``classes``, material of those classes or of none; with ``scope``, a persona's."""

    collections: list[CollectionName] = Field(min_length=1)
    classes: list[str] | None = Field(default=None, max_length=500)
    scope: ScopeFilter | None = None


class IndexChunksRequest(Request):
    """Chunks of the tenant by id. With ``visible``, only those the caller may see; without,
    any chunk of a document that is not deleted (the source viewer: the caller checks the
    collection and class itself)."""

    subject: ClassVar[str] = Subjects.INDEX_CHUNKS

    chunk_ids: list[uuid.UUID] = Field(min_length=1, max_length=500)
    visible: ChunkVisibility | None = None


class ChunkRow(BaseModel):
    """A chunk as the gateway shows and cites it, with its document's title."""

    chunk_id: uuid.UUID
    document_id: uuid.UUID
    chunk_index: int
    kind: str = "text"
    text: str
    context_prefix: str | None = None
    section_path: list[str] = Field(default_factory=list)
    chapter: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    slide: int | None = None
    collection: CollectionName = "educational"
    topic_tags: list[str] = Field(default_factory=list)
    language: str | None = None
    class_id: str | None = None
    title: str
    filename: str


class IndexChunksReply(Reply):
    """The chunks found, in no particular order (an id not found, or not visible, is left
    out)."""

    chunks: list[ChunkRow] = Field(default_factory=list)


class IndexTopicsRequest(Request):
    """The tenant's most common topic tags over searchable educational material, the
    ``course_subject``'s first (a refusal suggests them)."""

    subject: ClassVar[str] = Subjects.INDEX_TOPICS

    course_subject: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=5, ge=1, le=50)


class IndexTopicsReply(Reply):
    """Topic tags, most common first."""

    topics: list[str] = Field(default_factory=list)


class IndexCountRequest(Request):
    """How many searchable content chunks (text, table, Q&A) of the tenant a scope matches:
    a tutor persona must not be silently empty."""

    subject: ClassVar[str] = Subjects.INDEX_COUNT

    collections: list[CollectionName] = Field(default_factory=_educational, min_length=1)
    scope: ScopeFilter = Field(default_factory=ScopeFilter)


class IndexCountReply(Reply):
    """The count."""

    chunks: int = 0


class MaterialFilter(BaseModel):
    """Live material of the tenant a quiz, a drill or a syllabus reads: chunks of indexed
    documents in ``collections``. ``subject`` (case-insensitive), ``module`` and
    ``class_id`` match the document's, and material uploaded without one is not excluded by
    it; ``visible_classes`` (a student's): material of those classes or of none."""

    collections: list[CollectionName] = Field(min_length=1)
    subject: str | None = Field(default=None, max_length=200)
    module: str | None = Field(default=None, max_length=200)
    class_id: str | None = Field(default=None, max_length=200)
    visible_classes: list[str] | None = Field(default=None, max_length=500)
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=500)


class IndexMaterialRequest(Request):
    """A page of the material ``filter`` selects, in reading order. ``quiz``: content chunks
    and Q&A pairs, oldest document first, whole texts; ``syllabus``: text and table chunks
    by module, each text's first 1,200 characters."""

    subject: ClassVar[str] = Subjects.INDEX_MATERIAL

    filter: MaterialFilter
    purpose: Literal["quiz", "syllabus"]
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=500, ge=1, le=1000)


class MaterialRow(BaseModel):
    """A chunk of the material with its document's fields."""

    chunk_id: uuid.UUID
    document_id: uuid.UUID
    kind: str = "text"
    text: str
    section_path: list[str] = Field(default_factory=list)
    page_start: int | None = None
    page_end: int | None = None
    parent_chunk_id: uuid.UUID | None = None
    topic_tags: list[str] = Field(default_factory=list)
    title: str
    subject: str | None = None
    module_tag: str | None = None
    page_count: int | None = None
    filename: str
    collection: CollectionName = "educational"
    created_at: dt.datetime


class IndexMaterialReply(Reply):
    """The page; ``more`` when the next offset has rows."""

    rows: list[MaterialRow] = Field(default_factory=list)
    more: bool = False


class IndexOutlineRequest(Request):
    """A document's outline in vectors, for the curriculum proposals: the mean embedding of
    its text and table chunks, of each of its ``max_sections`` largest top-level sections,
    and the standards each section's chunks carry (read in one transaction)."""

    subject: ClassVar[str] = Subjects.INDEX_OUTLINE

    document_id: uuid.UUID
    max_sections: int = Field(default=20, ge=1, le=200)


class SectionOutline(BaseModel):
    """One top-level section: its heading path, mean embedding, chunks and first chunk."""

    path: list[str]
    centroid: list[float]
    chunks: int
    first: int


class IndexOutlineReply(Reply):
    """The document's mean embedding (None: no text or table chunk), its sections, and the
    curriculum standards each top-level section's chunks carry."""

    centroid: list[float] | None = None
    sections: list[SectionOutline] = Field(default_factory=list)
    standards: list[SectionStandards] = Field(default_factory=list)


register_request(IndexChunksRequest, IndexChunksReply)
register_request(IndexMaterialRequest, IndexMaterialReply)
register_request(IndexOutlineRequest, IndexOutlineReply)
register_request(IndexCountRequest, IndexCountReply)
register_request(IndexTopicsRequest, IndexTopicsReply)
