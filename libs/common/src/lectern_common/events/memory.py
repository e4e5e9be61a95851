"""Long-term memory: distillation events, and the requests the memory service answers about
the rows it owns (recall for a turn; list, forget, topics and export for the gateway, which
never reads the memory tables itself)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar, Literal

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


class MemoryEvidence(BaseModel):
    """One thing the student said or did that a memory rests on."""

    kind: str = Field(
        description="check_right, check_partly, check_wrong, check_skipped, quiz_right, "
        "quiz_wrong (an answer to a tutor check or a quiz item); said (a statement of "
        "confusion or preference, quoted in detail); repeated, flagged, gap"
    )
    detail: str = ""
    at: str = Field(default="", description="when (ISO 8601), empty when unknown")


class StoredMemory(BaseModel):
    """One long-term memory as stored, with the evidence behind it (newest last)."""

    id: uuid.UUID
    kind: MemoryKind
    text: str
    topic: str | None = None
    strength: float
    source_session_id: uuid.UUID | None = None
    created_at: datetime
    updated_at: datetime
    evidence: list[MemoryEvidence] = Field(default_factory=list)


class MemoryListRequest(Request):
    """A user's memories, newest first (``kinds``: only these kinds; empty: all)."""

    subject: ClassVar[str] = Subjects.MEMORY_LIST

    user_id: str = Field(min_length=1, max_length=200)
    kinds: list[MemoryKind] = Field(default_factory=list)


class MemoryListReply(Reply):
    """The user's memories, newest first."""

    memories: list[StoredMemory] = Field(default_factory=list)


class MemoryForgetRequest(Request):
    """Forget one memory of a user (``memory_id``), or all of them (``memory_id`` null):
    recall stops returning them at once."""

    subject: ClassVar[str] = Subjects.MEMORY_FORGET

    user_id: str = Field(min_length=1, max_length=200)
    memory_id: uuid.UUID | None = None


class MemoryForgetReply(Reply):
    """How many memories were deleted (0: none of that id, or none at all)."""

    deleted: int = 0


class MemoryTopicsRequest(Request):
    """Topics of one kind of memory over a set of users (a class roster, or one student),
    each with how many of those users have it: only topics at least ``min_users`` users
    have, never which users."""

    subject: ClassVar[str] = Subjects.MEMORY_TOPICS

    user_ids: list[str] = Field(max_length=10000)
    kind: MemoryKind = "struggle"
    min_users: int = Field(default=1, ge=1)
    limit: int = Field(default=100, ge=1, le=1000)


class MemoryTopic(BaseModel):
    """A topic, how many of the users have it, the evidence behind it and its strongest
    memory's strength."""

    topic: str
    users: int
    evidence: int
    strength: float


class MemoryTopicsReply(Reply):
    """Topics by users, then evidence, then name."""

    topics: list[MemoryTopic] = Field(default_factory=list)


class MemoryExportRequest(Request):
    """Every row the memory service keeps about a user, for the user's data export."""

    subject: ClassVar[str] = Subjects.MEMORY_EXPORT

    user_id: str = Field(min_length=1, max_length=200)


class MemoryExportReply(Reply):
    """The user's rows of each memory table, read in one snapshot, every column but the
    owner's tenant and user (and embeddings): ``memories``, ``quiz_tallies``,
    ``check_runs``, ``turn_signals``, ``distillations``."""

    memories: list[dict[str, Any]] = Field(default_factory=list)
    quiz_tallies: list[dict[str, Any]] = Field(default_factory=list)
    check_runs: list[dict[str, Any]] = Field(default_factory=list)
    turn_signals: list[dict[str, Any]] = Field(default_factory=list)
    distillations: list[dict[str, Any]] = Field(default_factory=list)

    def holds_anything(self) -> bool:
        """Whether any row of the user is left."""
        return bool(
            self.memories or self.quiz_tallies or self.check_runs or self.turn_signals
            or self.distillations
        )  # fmt: skip


register_request(MemoryListRequest, MemoryListReply)
register_request(MemoryForgetRequest, MemoryForgetReply)
register_request(MemoryTopicsRequest, MemoryTopicsReply)
register_request(MemoryExportRequest, MemoryExportReply)
