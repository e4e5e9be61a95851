"""Feedback and knowledge-gap events, for teachers' dashboards and anyone else."""

from __future__ import annotations

import uuid
from typing import ClassVar

from pydantic import Field

from lectern_common.events.base import Event, Subjects, register_event


@register_event
class FeedbackFlagged(Event):
    """A student flagged an answer."""

    subject: ClassVar[str] = Subjects.FEEDBACK_FLAGGED

    flag_id: uuid.UUID
    message_id: uuid.UUID
    session_id: uuid.UUID
    user_id: str
    reason: str = Field(description="incorrect, unclear, off_topic, inappropriate, other")
    details: str | None = None


@register_event
class KnowledgeGapDetected(Event):
    """A question the tutor had no good material for."""

    subject: ClassVar[str] = Subjects.KNOWLEDGE_GAP_DETECTED

    gap_id: uuid.UUID
    session_id: uuid.UUID
    user_id: str
    question: str
    topic: str | None = None
    subject_area: str | None = Field(default=None, description="the session's subject")
    confidence: float
