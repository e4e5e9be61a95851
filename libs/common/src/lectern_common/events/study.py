"""Study-tool events: a student's quiz attempt (for memory, and e.g. an LMS gradebook)."""

from __future__ import annotations

import uuid
from typing import ClassVar

from pydantic import BaseModel, Field

from lectern_common.events.base import Event, Subjects, register_event


class QuizAnswerResult(BaseModel):
    """How one question of the quiz was answered."""

    question_id: str
    kind: str = Field(description="multiple_choice, short_answer or true_false")
    correct: bool
    topic: str = Field(description="what the question is about (its section's heading)")
    document_id: uuid.UUID | None = None
    chunk_ids: list[uuid.UUID] = Field(default_factory=list)


@register_event
class QuizAttempted(Event):
    """A student submitted answers to a quiz and got them checked."""

    subject: ClassVar[str] = Subjects.QUIZ_ATTEMPTED

    attempt_id: uuid.UUID
    quiz_id: uuid.UUID
    user_id: str
    correct: int = Field(ge=0)
    total: int = Field(ge=0)
    results: list[QuizAnswerResult]
