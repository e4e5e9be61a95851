"""Chat events published by the gateway (and the idle sweep)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from lectern_common.events.base import Event, Subjects, register_event

ConfidenceBand = Literal["high", "medium", "low", "gap"]
BANDS: tuple[ConfidenceBand, ...] = ("high", "medium", "low", "gap")


def band_shares(bands: Sequence[str]) -> dict[str, float]:
    """Share of each confidence band among verdicts (zeros when there are none)."""
    n = len(bands)
    return {b: (sum(1 for x in bands if x == b) / n if n else 0.0) for b in BANDS}


class CitationRef(BaseModel):
    """One citation of an answer: a textbook chunk [T#] or a web page [W#]."""

    label: str = Field(description="T1.., W1..")
    chunk_id: uuid.UUID | None = None
    document_id: uuid.UUID | None = None
    url: str | None = None
    title: str | None = None
    support: float | None = Field(default=None, description="0..1 support of the cited span")


@register_event
class ChatTurnCompleted(Event):
    """A question was answered (or met with the knowledge-gap message)."""

    subject: ClassVar[str] = Subjects.CHAT_TURN_COMPLETED

    session_id: uuid.UUID
    user_id: str
    user_message_id: uuid.UUID
    assistant_message_id: uuid.UUID
    mode: Literal["chat", "tutor", "drill"] = "chat"
    question: str
    answer: str
    confidence: float = Field(ge=0.0, le=1.0)
    band: ConfidenceBand
    knowledge_gap: bool = False
    topic: str | None = None
    topics: list[str] = Field(
        default_factory=list,
        description="what the student's message is about, in the material's words, best "
        "first (lectern_common.topics); empty when no material was retrieved",
    )
    citations: list[CitationRef] = Field(default_factory=list)
    answered_by: str = Field(
        default="offline", description="gemini, gemini-secondary, fallback, offline, gap"
    )


@register_event
class ChatSessionEnded(Event):
    """A session ended: explicitly, or by the idle sweep."""

    subject: ClassVar[str] = Subjects.CHAT_SESSION_ENDED

    session_id: uuid.UUID
    user_id: str
    reason: Literal["explicit", "idle"] = "explicit"
    message_count: int = 0
    flagged_messages: int = Field(
        default=0,
        description="messages of the session flagged when it ended (feedback.flagged events "
        "sent before this one): memory distils once it has recorded them",
    )


@register_event
class ChatSessionsExpired(Event):
    """Sessions of the tenant passed its retention (``session_retention_days``) and were
    deleted by the gateway's sweep, in the transaction that wrote this event; every service
    deletes what it keeps of them (the memory service: its copies of their turns)."""

    subject: ClassVar[str] = Subjects.CHAT_SESSIONS_EXPIRED

    session_ids: list[uuid.UUID] = Field(max_length=1000)
    retention_days: int = Field(ge=1)
