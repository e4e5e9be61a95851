"""The typed events of the answer stream and of a document's progress stream.

The OpenAPI document describes the answer stream in prose only (an SSE body has no schema
there), so these models are written by hand after docs/api.md's "The answer stream"; the
citation inside them is the generated :class:`lectern_client.models.Citation`. Unknown fields
are ignored and an unknown event type arrives as :class:`UnknownEvent`, so a newer gateway does
not break an older client.
"""

from __future__ import annotations

import json
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from lectern_client.models import Citation, DocumentView

Band = Literal["high", "medium", "low", "gap"]


class Source(BaseModel):
    """One textbook source given to the model, labelled [T1]..[Tn]."""

    label: str
    chunk_id: UUID
    document_id: UUID
    title: str
    page_start: int | None = None
    page_end: int | None = None
    slide: int | None = None
    section: str | None = None
    score: float = 0.0


class SourcesEvent(BaseModel):
    """The sources the answer may cite (before the first token)."""

    type: Literal["sources"] = "sources"
    sources: list[Source]


class TokenEvent(BaseModel):
    """A text delta of the answer (``origin`` gateway: fixed wording such as a band preamble)."""

    type: Literal["token"] = "token"
    text: str
    origin: Literal["model", "gateway"] = "model"


class CitationEvent(BaseModel):
    """A citation, as soon as its sentence ends (or web grounding arrives)."""

    type: Literal["citation"] = "citation"
    citation: Citation


class CheckEvent(BaseModel):
    """Tutor and drill modes: a check question asked, or the student's reply judged."""

    type: Literal["check"] = "check"
    phase: Literal["asked", "judged"]
    question: str
    kind: str
    verdict: Literal["right", "partly", "wrong", "skipped"] | None = None
    expected: str | None = None
    evidence: str | None = None
    chunk_id: UUID | None = None


class ConfidenceEvent(BaseModel):
    """The final confidence and its parts."""

    type: Literal["confidence"] = "confidence"
    score: float
    band: Band
    retrieval: float = 0.0
    source_quality: float = 0.0
    grounding: float = 0.0
    grounding_is_prior: bool = False


class DoneEvent(BaseModel):
    """The turn is complete and stored (last event)."""

    type: Literal["done"] = "done"
    message_id: UUID
    user_message_id: UUID
    session_id: UUID
    citations: list[Citation]
    unsupported: list[str] = Field(default_factory=list)
    band: Band
    confidence: float
    knowledge_gap: bool = False
    answered_by: str
    persona: str | None = None
    memories_used: list[str] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ErrorEvent(BaseModel):
    """The turn failed on the server's side; nothing follows (``retryable``: asking again may
    work)."""

    type: Literal["error"] = "error"
    reason: str
    message: str
    retryable: bool = False


class RestartEvent(BaseModel):
    """The turn is answered again from its start: the gateway replica answering it stopped,
    another took it over, and the new text may differ. Discard the turn's events so far
    (``AnswerStream.collect()`` does); ``sources`` and the rest follow."""

    type: Literal["restart"] = "restart"
    reason: str = "takeover"
    message: str = ""


class UnknownEvent(BaseModel):
    """An event type this client does not know (a newer gateway): its name and raw data."""

    type: str
    data: dict[str, Any] = Field(default_factory=dict)


AnswerEvent = (
    SourcesEvent
    | TokenEvent
    | CitationEvent
    | CheckEvent
    | ConfidenceEvent
    | DoneEvent
    | ErrorEvent
    | RestartEvent
    | UnknownEvent
)

_ANSWER_EVENTS: dict[str, type[BaseModel]] = {
    "sources": SourcesEvent,
    "token": TokenEvent,
    "citation": CitationEvent,
    "check": CheckEvent,
    "confidence": ConfidenceEvent,
    "done": DoneEvent,
    "error": ErrorEvent,
    "restart": RestartEvent,
}


def parse_answer_event(name: str, data: str) -> AnswerEvent:
    """One SSE frame of the answer stream as its typed event."""
    body = json.loads(data) if data else {}
    kind = str(body.get("type") or name) if isinstance(body, dict) else name
    model = _ANSWER_EVENTS.get(kind)
    if model is None:
        return UnknownEvent(type=kind, data=body if isinstance(body, dict) else {"data": body})
    event: AnswerEvent = model.model_validate(body)  # type: ignore[assignment]
    return event


class Answer(BaseModel):
    """A whole answer, collected from its stream (``AnswerStream.collect()``)."""

    text: str
    sources: list[Source] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    checks: list[CheckEvent] = Field(default_factory=list)
    confidence: ConfidenceEvent | None = None
    done: DoneEvent | None = None
    error: ErrorEvent | None = None


class DocumentProgress(BaseModel):
    """Ingest progress of a document: ``done`` of ``total`` ``unit`` in ``stage``."""

    type: Literal["progress"] = "progress"
    stage: str | None = None
    done: int | None = None
    total: int | None = None
    unit: str | None = None


class DocumentStatus(BaseModel):
    """A document's state: first ``status``, then its outcome (``indexed``, ``duplicate``,
    ``failed``, ``deleted`` ...) as ``type`` with the document's view."""

    type: str
    document: DocumentView

    @property
    def final(self) -> bool:
        """Whether this is the outcome (the stream ends after it)."""
        return self.type != "status"


DocumentEvent = DocumentProgress | DocumentStatus


def parse_document_event(name: str, data: str) -> DocumentEvent | None:
    """One SSE frame of ``GET /v1/documents/{id}/events`` (None for an unknown one)."""
    body = json.loads(data) if data else {}
    if name == "progress":
        return DocumentProgress.model_validate(body)
    if isinstance(body, dict) and "id" in body and "status" in body:
        return DocumentStatus(type=name, document=DocumentView.model_validate(body))
    return None
