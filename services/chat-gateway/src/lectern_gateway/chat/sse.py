"""The typed Server-Sent Events of ``POST /v1/sessions/{id}/messages``.

Every event's SSE ``event:`` name equals its ``type`` and its ``data:`` is the JSON of the
model below, so a client can parse ``data`` alone with the discriminated union
:data:`ChatEvent`. Order of one turn: ``sources`` -> ``token``* (interleaved with
``citation`` and, in tutor and drill modes, ``check``) -> ``confidence`` -> ``done``;
``error`` replaces the rest on failure; ``restart`` (a turn taken over by another replica
whose re-run may differ) says to discard the turn's events before it.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from lectern_common.events.chat import ConfidenceBand
from lectern_common.events.retrieval import AnswerSpan


class Source(BaseModel):
    """One textbook source given to the model, labelled [T1]..[Tn]."""

    label: str = Field(description="T1, T2, ...")
    chunk_id: uuid.UUID
    document_id: uuid.UUID
    title: str
    page_start: int | None = None
    page_end: int | None = None
    slide: int | None = None
    section: str | None = None
    score: float = 0.0
    answer: AnswerSpan | None = Field(
        default=None,
        description="where the re-ranker's reader found the answer in the chunk's text "
        "(character offsets, for the source viewer to highlight), with its score against "
        "the 'no answer here' score; absent when the reader marked none",
    )


class SourcesEvent(BaseModel):
    """The sources the answer may cite (sent before the first token)."""

    type: Literal["sources"] = "sources"
    sources: list[Source]
    reranked: bool = Field(
        default=True,
        description="false: the re-ranker did not answer in time, so the sources are the "
        "retriever's order and the verdict is from the retriever's scores (at most `low`)",
    )


class TokenEvent(BaseModel):
    """A text delta of the answer, sent as soon as the model produces it."""

    type: Literal["token"] = "token"
    text: str
    origin: Literal["model", "gateway"] = Field(
        default="model", description="gateway: fixed wording (band preamble, gap message)"
    )


class TableCell(BaseModel):
    """The cell of a table row an answer quotes that the question asks for: the column whose
    header says most of the question, in the row the answer leads with."""

    start: int = Field(ge=0, description="first character of the cell in the chunk's text")
    end: int = Field(ge=0, description="one past its last character")
    header: str = Field(description="its column's header")


class Citation(BaseModel):
    """A citation: a textbook source [T#] covering a span, or a web page [W#]."""

    label: str = Field(description="T1.. or W1..")
    kind: Literal["textbook", "web"]
    chunk_id: uuid.UUID | None = None
    document_id: uuid.UUID | None = None
    url: str | None = None
    title: str | None = None
    span_start: int | None = Field(default=None, description="character offset in the answer")
    span_end: int | None = None
    text: str | None = Field(default=None, description="the cited sentence")
    support: float | None = Field(default=None, description="0..1 support of the span")
    answer: AnswerSpan | None = Field(
        default=None,
        description="the answer span the re-ranker's reader marked in the cited chunk "
        "(character offsets in the chunk's text), when the cited sentence holds its words",
    )
    cell: TableCell | None = Field(
        default=None,
        description="when the cited sentence quotes a table row: the cell the question asks "
        "for (character offsets in the cited chunk's text, for the source viewer to mark)",
    )
    supported: bool | None = Field(default=None, description="false: flagged unsupported")
    valid: bool = Field(default=True, description="false: the label names no given source")


class CitationEvent(BaseModel):
    """A citation, as soon as it is known (a finished cited sentence, or web grounding)."""

    type: Literal["citation"] = "citation"
    citation: Citation


class ConfidenceEvent(BaseModel):
    """The final confidence: the re-ranker's with measured grounding replacing its prior."""

    type: Literal["confidence"] = "confidence"
    score: float
    band: ConfidenceBand
    retrieval: float = 0.0
    source_quality: float = 0.0
    grounding: float = 0.0
    grounding_is_prior: bool = False


class DoneEvent(BaseModel):
    """The turn is complete and stored."""

    type: Literal["done"] = "done"
    message_id: uuid.UUID
    user_message_id: uuid.UUID
    session_id: uuid.UUID
    citations: list[Citation]
    unsupported: list[str] = Field(
        default_factory=list, description="labels of citations flagged unsupported or invalid"
    )
    band: ConfidenceBand
    confidence: float
    knowledge_gap: bool = False
    answered_by: str = Field(
        description="gemini, gemini-secondary, fallback (OpenAI-compatible), offline, gap, "
        "tutor-check, drill or social (a reply to small talk: thanks, greetings)"
    )
    persona: str | None = Field(
        default=None, description="the tutor persona that answered: slug@version"
    )
    memories_used: list[str] = Field(
        default_factory=list, description="long-term memories of the student put in the prompt"
    )
    usage: dict[str, Any] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class CheckEvent(BaseModel):
    """Tutor and drill modes: a check question asked, or the student's reply judged."""

    type: Literal["check"] = "check"
    phase: Literal["asked", "judged"]
    question: str
    kind: str = Field(description="short_answer or true_false")
    verdict: Literal["right", "partly", "wrong", "skipped"] | None = Field(
        default=None,
        description="judged: how the reply measured against the sources (skipped: the "
        "student said skip, or only ok or thanks)",
    )
    expected: str | None = Field(default=None, description="judged: the answer")
    evidence: str | None = Field(default=None, description="judged: the passage's sentence")
    chunk_id: uuid.UUID | None = Field(default=None, description="judged: the passage")


class ErrorEvent(BaseModel):
    """The turn failed; nothing more follows."""

    type: Literal["error"] = "error"
    reason: str
    message: str
    retryable: bool = False


class RestartEvent(BaseModel):
    """The turn is answered again from its start: the replica answering it stopped, another
    took it over, and its text may differ from what was sent. Discard this turn's events so
    far; ``sources`` and the rest follow."""

    type: Literal["restart"] = "restart"
    reason: Literal["takeover"] = "takeover"
    message: str


ChatEvent = Annotated[
    SourcesEvent
    | TokenEvent
    | CitationEvent
    | ConfidenceEvent
    | CheckEvent
    | DoneEvent
    | ErrorEvent
    | RestartEvent,
    Field(discriminator="type"),
]
CHAT_EVENT_ADAPTER: TypeAdapter[ChatEvent] = TypeAdapter(ChatEvent)


def parse_event(data: str) -> ChatEvent:
    """Parse an event's ``data`` (clients and tests)."""
    return CHAT_EVENT_ADAPTER.validate_json(data)
