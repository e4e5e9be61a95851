"""Study-tool events: a student's quiz attempt (for memory, and e.g. an LMS gradebook)."""

from __future__ import annotations

import uuid
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from lectern_common.events.base import Event, Subjects, register_event


class QuizAnswerResult(BaseModel):
    """How one question of the quiz was answered."""

    question_id: str
    kind: str = Field(description="multiple_choice, short_answer or true_false")
    correct: bool
    outcome: Literal["right", "partly", "wrong", "skipped"] | None = Field(
        default=None,
        description="a tutor check's verdict; skipped: the student moved on without "
        "answering (evidence against mastery, not of a struggle). None: right or wrong as "
        "``correct`` says",
    )
    topic: str = Field(
        description="what the question is about: a check's, the student's question's topic; "
        "a quiz item's, its section's heading"
    )
    document_id: uuid.UUID | None = None
    chunk_ids: list[uuid.UUID] = Field(default_factory=list)
    section: str | None = Field(
        default=None,
        description="a tutor check's: the heading path of the section its statement comes "
        "from, when the material has one below its title (memory counts right checks by "
        "section across sessions)",
    )
    document_title: str | None = Field(
        default=None, description="the title of the document the question comes from"
    )


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
    session_id: uuid.UUID | None = Field(
        default=None,
        description="a tutor check's chat session (memory counts the sessions running in "
        "which a topic's checks were right); None for a quiz",
    )
