"""Base classes, subject names and the registry of every contract."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field


def _now() -> datetime:
    return datetime.now(UTC)


class Subjects:
    """Every NATS subject Lectern uses."""

    DOCUMENTS_UPLOADED = "lectern.documents.uploaded.v1"
    DOCUMENTS_PROGRESS = "lectern.documents.progress.v1"
    DOCUMENTS_INDEXED = "lectern.documents.indexed.v1"
    DOCUMENTS_FAILED = "lectern.documents.failed.v1"
    DOCUMENTS_DELETED = "lectern.documents.deleted.v1"
    DOCUMENTS_UPDATED = "lectern.documents.updated.v1"
    DOCUMENTS_ARCHIVED = "lectern.documents.archived.v1"
    DOCUMENTS_RESTORED = "lectern.documents.restored.v1"
    DOCUMENTS_CONFLICTS = "lectern.documents.conflicts.v1"
    CHAT_TURN_COMPLETED = "lectern.chat.turn.completed.v1"
    CHAT_SESSION_ENDED = "lectern.chat.session.ended.v1"
    CHAT_SESSIONS_EXPIRED = "lectern.chat.sessions.expired.v1"
    MEMORY_DISTILLED = "lectern.memory.distilled.v1"
    FEEDBACK_FLAGGED = "lectern.feedback.flagged.v1"
    KNOWLEDGE_GAP_DETECTED = "lectern.knowledge_gap.detected.v1"
    QUIZ_ATTEMPTED = "lectern.quiz.attempted.v1"
    USERS_ERASED = "lectern.users.erased.v1"
    RETRIEVE = "lectern.retrieve.v1"
    RERANK = "lectern.rerank.v1"
    INDEX_CHUNKS = "lectern.index.chunks.v1"
    INDEX_TOPICS = "lectern.index.topics.v1"
    INDEX_COUNT = "lectern.index.count.v1"
    INDEX_MATERIAL = "lectern.index.material.v1"
    INDEX_OUTLINE = "lectern.index.outline.v1"
    INDEX_VECTORS = "lectern.index.vectors.v1"
    MEMORY_RECALL = "lectern.memory.recall.v1"
    MEMORY_LIST = "lectern.memory.list.v1"
    MEMORY_FORGET = "lectern.memory.forget.v1"
    MEMORY_TOPICS = "lectern.memory.topics.v1"
    MEMORY_EXPORT = "lectern.memory.export.v1"
    CHUNKS_CURRICULUM = "lectern.chunks.curriculum.v1"
    DEAD_LETTER = "lectern.deadletter.v1"


class Event(BaseModel):
    """A fact that happened, published on JetStream. Consumers ignore unknown fields."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    subject: ClassVar[str]

    event_id: uuid.UUID = Field(default_factory=uuid.uuid4, description="unique per event")
    occurred_at: datetime = Field(default_factory=_now, description="when it happened (UTC)")
    tenant_id: str = Field(min_length=1, max_length=128, description="owning tenant")


class Request(BaseModel):
    """A request sent with NATS request/reply to a queue group."""

    model_config = ConfigDict(extra="ignore")

    subject: ClassVar[str]

    request_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    tenant_id: str = Field(min_length=1, max_length=128)
    deadline: float | None = Field(
        default=None,
        description="Unix time (seconds) after which the caller no longer waits for the reply "
        "(set from the request's timeout when it is sent): a responder that takes the request "
        "more than a second later answers `expired` without doing its work (the second allows "
        "for another host's clock)",
    )


class Reply(BaseModel):
    """The answer to a :class:`Request`. ``error`` is set instead of a result on failure."""

    model_config = ConfigDict(extra="ignore")

    request_id: uuid.UUID
    error: str | None = Field(default=None, description="reason code when the request failed")
    error_message: str | None = None


ALL_EVENTS: list[type[Event]] = []
ALL_REQUESTS: list[tuple[type[Request], type[Reply]]] = []


E = TypeVar("E", bound=type[Event])


def register_event(cls: E) -> E:
    """Add an event class to the registry used by AsyncAPI export and snapshot tests."""
    ALL_EVENTS.append(cls)
    return cls


def register_request(request: type[Request], reply: type[Reply]) -> None:
    """Add a request/reply pair to the registry."""
    ALL_REQUESTS.append((request, reply))
