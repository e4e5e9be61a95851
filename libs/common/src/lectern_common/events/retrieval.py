"""Retrieval and re-ranking request/reply contracts."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from lectern_common.events.base import Reply, Request, Subjects, register_request
from lectern_common.events.chat import ConfidenceBand

CollectionName = Literal["educational", "assessment"]
Method = Literal["dense", "sparse"]
ChunkKind = Literal["text", "table", "qa", "references", "contents", "index"]
#: what chunks hold: the rest (reference lists, tables of contents, indexes) is kept, typed,
#: and only searched when a request asks for those kinds
CONTENT_KINDS: tuple[ChunkKind, ...] = ("text", "table", "qa")


def _educational_only() -> list[CollectionName]:
    return ["educational"]


def _both_methods() -> list[Method]:
    return ["dense", "sparse"]


class ScopeFilter(BaseModel):
    """The material in a tutor persona's scope: each list set matches any of its values."""

    subjects: list[str] = Field(default_factory=list, max_length=50)
    modules: list[str] = Field(default_factory=list, max_length=50)
    class_ids: list[str] = Field(default_factory=list, max_length=200)
    topic_tags: list[str] = Field(default_factory=list, max_length=50)


class RetrievalFilters(BaseModel):
    """Metadata filters applied before any vector math. Tenant is always applied separately."""

    collections: list[CollectionName] = Field(
        default_factory=_educational_only,
        description="students are always limited to educational",
    )
    subject: str | None = Field(default=None, description="matched case-insensitively")
    grade_level: int | None = Field(default=None, ge=0, le=20)
    grade_within_one: bool = Field(default=False, description="accept grade_level +/- 1")
    module_tag: str | None = None
    include_untagged: bool = Field(
        default=False,
        description="material without a subject, grade or module matches those filters too "
        "(chat: a course's untagged uploads must not silently disappear)",
    )
    kinds: list[ChunkKind] | None = Field(
        default=None,
        description="chunk kinds to search; unset: content only (text, table, qa), never "
        "reference lists, tables of contents or indexes",
    )
    class_id: str | None = None
    class_ids: list[str] | None = Field(
        default=None,
        max_length=200,
        description="only material of these classes (a student's own); with "
        "include_unassigned, material assigned to no class too",
    )
    include_unassigned: bool = Field(
        default=False,
        description="with class_id or class_ids: material assigned to no class matches too",
    )
    scope: ScopeFilter | None = Field(
        default=None, description="a tutor persona's material: every list set must match"
    )
    language: str | None = None
    content_types: list[str] | None = None
    document_ids: list[uuid.UUID] | None = None
    curriculum_standards: list[str] | None = Field(
        default=None,
        description="material tagged with any of these curriculum standards (with "
        "include_untagged: material tagged with none matches too)",
    )


class Turn(BaseModel):
    """One earlier message, for pronoun resolution in query rewriting."""

    role: Literal["user", "assistant"]
    text: str


class RetrieveRequest(Request):
    """Ranked candidate chunks for a question."""

    subject: ClassVar[str] = Subjects.RETRIEVE

    query: str = Field(min_length=1, max_length=4000)
    filters: RetrievalFilters = Field(default_factory=RetrievalFilters)
    k: int = Field(default=20, ge=1, le=200, description="candidates returned after fusion")
    k_dense: int = Field(default=20, ge=0, le=1000)
    k_sparse: int = Field(default=20, ge=0, le=1000)
    dense_weight: float | None = Field(default=None, ge=0.0, description="unset: service default")
    sparse_weight: float | None = Field(default=None, ge=0.0)
    max_per_document: int | None = Field(default=3, ge=1)
    ef_search: int | None = Field(default=None, ge=10, le=1000)
    rewrite: bool = True
    multi_hop: bool = True
    history: list[Turn] = Field(default_factory=list, description="last turns, newest last")
    boost_tags: list[str] = Field(default_factory=list, description="topic tags to boost")
    idf_words: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="words whose BM25 idf in the tenant's library the reply carries (the "
        "answerer's rare-word signal), so the caller reads no index statistics itself",
    )
    cited_document_ids: list[uuid.UUID] = Field(
        default_factory=list, description="documents cited in the last turns (boosted)"
    )
    methods: list[Method] = Field(
        default_factory=_both_methods, description="for evaluation: one side only"
    )


class Candidate(BaseModel):
    """One retrieved chunk with its provenance and scores."""

    chunk_id: uuid.UUID
    document_id: uuid.UUID
    title: str
    text: str
    kind: str = "text"
    context_prefix: str | None = None
    section_path: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    slide: int | None = None
    time_start: float | None = None
    token_count: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    dense_rank: int | None = None
    dense_score: float | None = None
    sparse_rank: int | None = None
    sparse_score: float | None = None
    fused_score: float = 0.0


class RetrieveReply(Reply):
    """Candidates best first, the queries actually run, and per-stage timings."""

    candidates: list[Candidate] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)
    idf: dict[str, float] = Field(
        default_factory=dict,
        description="the BM25 idf of each asked ``idf_words`` word (its English lexeme's) in "
        "the tenant's library; a stop word or a word the library lacks is left out",
    )
    timings_ms: dict[str, float] = Field(default_factory=dict)


class StudentContext(BaseModel):
    """What the re-ranker knows of the asker, for the educational signals."""

    user_id: str | None = None
    grade_level: int | None = None
    subject: str | None = None
    class_id: str | None = None
    teacher_ids: list[str] = Field(default_factory=list, description="the class's teachers")
    curriculum_standards: list[str] = Field(default_factory=list)
    learning_style: str | None = Field(default=None, description="visual, reading, examples ...")
    preferred_content_types: list[str] = Field(default_factory=list)


class RerankRequest(Request):
    """Final context for a question from retrieved candidates."""

    subject: ClassVar[str] = Subjects.RERANK

    query: str = Field(min_length=1, max_length=4000)
    candidates: list[Candidate]
    student: StudentContext = Field(default_factory=StudentContext)
    top_k: int = Field(default=5, ge=1, le=100)
    token_budget: int = Field(default=6000, ge=100)


class AnswerSpan(BaseModel):
    """Where the re-ranker's reader found the answer in a chunk: ``text[start:end]`` of the
    chunk's ``text`` (character offsets), the span's score and the "no answer here" score of
    the same read (SQuAD 2.0's null score). ``margin`` > 0: the reader says the chunk answers."""

    start: int = Field(ge=0, description="first character of the answer in the chunk's text")
    end: int = Field(ge=0, description="one past its last character")
    score: float = Field(description="the span's start + end logits")
    null_score: float = Field(description="the [CLS] piece's start + end logits: no answer")

    @property
    def margin(self) -> float:
        """How far the span beats "no answer here"."""
        return self.score - self.null_score


class RankedChunk(BaseModel):
    """A candidate with its re-ranking scores."""

    candidate: Candidate
    semantic: float
    signals: dict[str, float] = Field(default_factory=dict)
    score: float
    answer: AnswerSpan | None = Field(
        default=None,
        description="the reader's best answer span in the chunk (a reader with a span head, "
        "candidates it read; absent otherwise or when the span fell outside the chunk's text)",
    )


class Confidence(BaseModel):
    """The confidence verdict and its parts."""

    score: float = Field(ge=0.0, le=1.0)
    band: ConfidenceBand
    retrieval: float
    source_quality: float
    grounding: float
    grounding_is_prior: bool = True


class RerankReply(Reply):
    """Chunks best first under the token budget, the scorer used, and the confidence."""

    chunks: list[RankedChunk] = Field(default_factory=list)
    scorer: Literal["cross-encoder", "bi-encoder"] = "bi-encoder"
    confidence: Confidence | None = None
    dropped_duplicates: int = 0
    #: each candidate dropped as a near-duplicate -> the chunk kept in its place (optional)
    duplicates: dict[uuid.UUID, uuid.UUID] = Field(
        default_factory=dict,
        description="chunk id dropped as a near-duplicate -> the chunk id kept in its place",
    )
    dropped_for_budget: int = 0
    timings_ms: dict[str, float] = Field(default_factory=dict)


register_request(RetrieveRequest, RetrieveReply)
register_request(RerankRequest, RerankReply)
