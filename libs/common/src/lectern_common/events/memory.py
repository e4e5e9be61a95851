"""Long-term memory: distillation events and recall request/reply."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from lectern_common.events.base import (
    Event,
    Reply,
    Request,
    Subjects,
    register_event,
    register_request,
)

MemoryKind = Literal["takeaway", "struggle", "mastered", "preference"]


@register_event
class MemoryDistilled(Event):
    """A session was distilled into long-term memories."""

    subject: ClassVar[str] = Subjects.MEMORY_DISTILLED

    session_id: uuid.UUID
    user_id: str
    created: list[uuid.UUID] = Field(default_factory=list)
    updated: list[uuid.UUID] = Field(default_factory=list)
    distiller: str = Field(default="deterministic", description="gemini or deterministic")


class MemoryRecallRequest(Request):
    """Top memories of one student for a query."""

    subject: ClassVar[str] = Subjects.MEMORY_RECALL

    user_id: str
    query: str
    k: int = Field(default=3, ge=1, le=20)


class RecalledMemory(BaseModel):
    """One recalled memory."""

    memory_id: uuid.UUID
    kind: MemoryKind
    text: str
    topic: str | None = None
    strength: float
    score: float
    updated_at: datetime


class MemoryRecallReply(Reply):
    """The recalled memories, best first."""

    memories: list[RecalledMemory] = Field(default_factory=list)
    took_ms: float = 0.0


register_request(MemoryRecallRequest, MemoryRecallReply)
