"""Reads of the index the retriever answers for the other services (issue 61): the
retriever owns every read of ``chunks`` and the BM25 statistics, as ingest owns their writes,
so a change to the chunk schema is made in those two services only."""

from __future__ import annotations

import uuid
from typing import ClassVar

from pydantic import BaseModel, Field

from lectern_common.events.base import Reply, Request, Subjects, register_request
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

    chunk_ids: list[uuid.UUID] = Field(min_length=1, max_length=2000)
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


register_request(IndexChunksRequest, IndexChunksReply)
register_request(IndexCountRequest, IndexCountReply)
register_request(IndexTopicsRequest, IndexTopicsReply)
