"""Reads of the index the retriever answers for the other services (issue 61): the
retriever owns every read of ``chunks`` and the BM25 statistics, as ingest owns their writes,
so a change to the chunk schema is made in those two services only."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field, model_validator

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


class IndexVectorsRequest(Request):
    """The index's stored embeddings of the tenant's chunks among ``chunk_ids``, when the
    index holds ``model``'s vectors (the re-ranker's bi-encoder reuses them instead of
    embedding the candidates again)."""

    subject: ClassVar[str] = Subjects.INDEX_VECTORS

    chunk_ids: list[uuid.UUID] = Field(min_length=1, max_length=500)
    model: str = Field(min_length=1, max_length=200, description="the caller's embedding model")


#: base64 of float32 little-endian values
_BASE64 = r"^[A-Za-z0-9+/]*={0,2}$"


class ChunkVector(BaseModel):
    """One chunk's stored embedding, ``vector`` the base64 of its float32 little-endian
    values (a 384-dimension vector is 2,048 characters, against ~7,500 as a JSON list)."""

    chunk_id: uuid.UUID
    vector: str = Field(pattern=_BASE64)

    @classmethod
    def of(cls, chunk_id: uuid.UUID, values: Sequence[float] | NDArray[np.float32]) -> ChunkVector:
        """The wire form of ``values``."""
        raw = np.asarray(values, dtype="<f4").tobytes()
        return cls(chunk_id=chunk_id, vector=base64.b64encode(raw).decode("ascii"))

    def values(self) -> NDArray[np.float32]:
        """The vector as float32 values (native byte order)."""
        raw = np.frombuffer(base64.b64decode(self.vector), dtype="<f4")
        return raw.astype(np.float32)


class IndexVectorsReply(Reply):
    """The model the index was built with and its dimension (None before one is recorded),
    and the vectors of the chunks found: none unless that model is the one asked for (read
    in one statement with the vectors, so a re-index cannot switch the model between the
    check and the read). A found chunk's vector is left out, ``more`` set, when the reply
    would pass ~700 KB (NATS's message is at most 1 MB); the caller embeds it itself."""

    model: str | None = None
    dimension: int | None = Field(default=None, ge=1)
    vectors: list[ChunkVector] = Field(default_factory=list)
    more: bool = False

    @model_validator(mode="after")
    def _vectors_of_the_dimension(self) -> IndexVectorsReply:
        """Each vector holds ``dimension`` float32 values (base64: 4 bytes each)."""
        for found in self.vectors:
            size = len(base64.b64decode(found.vector))
            if self.dimension is None or size != 4 * self.dimension:
                raise ValueError(
                    f"chunk {found.chunk_id}: {size} bytes, not {self.dimension} float32 values"
                )
        return self


register_request(IndexChunksRequest, IndexChunksReply)
register_request(IndexMaterialRequest, IndexMaterialReply)
register_request(IndexOutlineRequest, IndexOutlineReply)
register_request(IndexCountRequest, IndexCountReply)
register_request(IndexTopicsRequest, IndexTopicsReply)
register_request(IndexVectorsRequest, IndexVectorsReply)
