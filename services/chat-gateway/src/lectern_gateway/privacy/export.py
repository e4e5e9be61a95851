"""Everything Lectern keeps about a user, as one JSON document (``lectern.user-export.v1``).

The gateway's parts are read in one read-only, repeatable-read transaction, so they agree
with each other; the memory service's parts come from it (``lectern.memory.export.v1``,
its own snapshot of its own tables), so the export needs the memory service answering (503
otherwise). What each part holds, and what is deliberately not in it:

- ``sessions``, each with its ``messages`` (the student's questions and the tutor's answers
  with their citations, confidence, who answered, and ``tutor_check``: the check question an
  answer asked and, once the reply was judged, its verdict);
- ``quizzes`` the user drew, ``quiz_attempts`` (answers given, results), ``feedback_flags``
  the user raised, ``knowledge_gaps`` (questions the material could not answer),
  ``notices`` (what the student was told), ``usage`` (messages per day), ``classes``
  (roster entries), ``documents`` the user uploaded or co-owns (metadata, not the files);
- the memory service's rows: ``memories`` (without their embeddings: numbers derived from
  the text, meaningless outside the index), ``quiz_tallies`` (right/wrong runs per topic),
  ``check_runs`` (tutor checks' sessions running per section or topic word),
  ``turn_signals`` (its copies of the turns, kept to distil sessions), ``distillations``
  (which session made which memories);
- ``events``: outbox rows of events about the user (pending, or sent and not yet pruned).

Not exported: ``chat_turns`` (a turn's streamed events, copies of the stored messages, kept
``LECTERN_GATEWAY_TURN_RETENTION_S`` for resuming streams); the quality dashboard's
aggregates (counts per day without a user; their gap topics come from the gaps exported
here); the tenant's API keys (created by admins, never a student's); the staff audit trail
(``document_audit``, ``resolved_by``, ``added_by`` name the staff member, not the student).
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any, Literal

from faststream.nats import NatsBroker
from pydantic import BaseModel, ConfigDict, Field

from lectern_common.db.types import Pool
from lectern_gateway.memories import service as memories
from lectern_gateway.privacy import repository as repo

EXPORT_FORMAT: Literal["lectern.user-export.v1"] = "lectern.user-export.v1"


class Row(BaseModel):
    """A stored row with every column but the owner's tenant and user: the ones named here,
    and any other the table has (a column added later is exported as it is)."""

    model_config = ConfigDict(extra="allow")


class ExportedMessage(Row):
    """A question or an answer."""

    id: uuid.UUID
    role: Literal["user", "assistant"]
    content: str
    citations: list[dict[str, Any]] = Field(default_factory=list)
    confidence: float | None = None
    confidence_band: str | None = None
    answered_by: str | None = None
    tutor_check: dict[str, Any] | None = Field(
        default=None,
        description="the check question this answer asked (prompt, expected answer, source) "
        "and its status: pending, skipped, or judged with the verdict",
    )
    usage: dict[str, Any] = Field(default_factory=dict)
    timings: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class ExportedSession(Row):
    """A chat, tutor or drill session and its messages, oldest first."""

    id: uuid.UUID
    mode: str
    subject: str | None = None
    module_tag: str | None = None
    class_id: str | None = None
    grade_level: int | None = None
    learning_style: str | None = None
    explanation_depth: str | None = None
    curriculum_standards: list[str] = Field(default_factory=list)
    title: str | None = None
    status: str
    end_reason: str | None = None
    persona_slug: str | None = None
    persona_version: int | None = None
    created_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None = None
    messages: list[ExportedMessage] = Field(default_factory=list)


class ExportedQuiz(Row):
    """A quiz the user drew."""

    id: uuid.UUID
    title: str
    difficulty: str
    request: dict[str, Any]
    generator: str
    assigned_class_id: str | None = None
    questions: list[dict[str, Any]]
    created_at: datetime


class ExportedQuizAttempt(Row):
    """Answers to a quiz and how they were checked."""

    id: uuid.UUID
    quiz_id: uuid.UUID
    quiz_title: str | None = None
    answers: dict[str, Any]
    results: list[dict[str, Any]]
    correct: int
    total: int
    created_at: datetime


class ExportedFlag(Row):
    """An answer the user flagged."""

    id: uuid.UUID
    message_id: uuid.UUID
    session_id: uuid.UUID
    reason: str
    details: str | None = None
    status: str
    resolution: str | None = None
    action: str | None = None
    created_at: datetime
    resolved_at: datetime | None = None


class ExportedGap(Row):
    """A question the material could not answer (the teachers' review queue)."""

    id: uuid.UUID
    session_id: uuid.UUID | None = None
    message_id: uuid.UUID | None = None
    question: str
    topic: str | None = None
    subject: str | None = None
    confidence: float
    related_topics: list[str] = Field(default_factory=list)
    status: str
    created_at: datetime
    answered_at: datetime | None = None
    answer_session_id: uuid.UUID | None = None


class ExportedNotice(Row):
    """Something the student was told."""

    id: uuid.UUID
    kind: str
    text: str
    session_id: uuid.UUID | None = None
    created_at: datetime
    read_at: datetime | None = None


class ExportedUsage(Row):
    """Messages sent on one day (the plan's daily limit)."""

    day: date
    messages: int


class ExportedClass(Row):
    """A class roster the user is on."""

    class_id: str
    added_by: str
    added_at: datetime


class ExportedLmsAccount(Row):
    """An LMS account (LTI) linked to the user: its platform, its ``sub``, and the name and
    e-mail as the platform sent them."""

    issuer: str
    client_id: str
    sub: str
    name: str | None = None
    given_name: str | None = None
    family_name: str | None = None
    email: str | None = None
    created_at: datetime
    updated_at: datetime


class ExportedLmsScore(Row):
    """A quiz score for an LMS gradebook, sent or waiting."""

    lineitem_url: str
    score: dict[str, Any]
    status: str
    created_at: datetime
    sent_at: datetime | None = None


class ExportedDocument(Row):
    """A document the user uploaded or co-owns (its metadata; the file is the course's)."""

    id: uuid.UUID
    title: str
    filename: str
    status: str
    collection: str
    created_at: datetime


class ExportedEvent(Row):
    """An event about the user still in the outbox."""

    id: uuid.UUID
    subject: str
    payload: dict[str, Any]
    created_at: datetime
    published_at: datetime | None = None


class ExportedMemory(Row):
    """A long-term memory (without its embedding)."""

    id: uuid.UUID
    kind: str
    text: str
    topic: str | None = None
    strength: float
    source_session_id: uuid.UUID | None = None
    created_at: datetime
    updated_at: datetime


class ExportedQuizTally(Row):
    """How quizzes and checks on a topic went (memory's mastery tally)."""

    topic: str
    right_streak: int
    wrong_total: int
    updated_at: datetime


class ExportedCheckRun(Row):
    """How tutor checks on a unit (a section of the material, or a topic word) went, session
    by session (memory's count of sessions running towards mastery)."""

    unit: str
    session_id: uuid.UUID
    session_right: bool
    sessions_running: int
    topics: list[str]
    earlier_topics: list[str]
    updated_at: datetime


class ExportedTurnSignal(Row):
    """The memory service's copy of a turn, kept to distil its session."""

    assistant_message_id: uuid.UUID
    session_id: uuid.UUID
    question: str
    answer: str
    band: str
    confidence: float
    knowledge_gap: bool
    topic: str | None = None
    occurred_at: datetime


class ExportedDistillation(Row):
    """Which memories a session made or changed."""

    session_id: uuid.UUID
    created: list[uuid.UUID]
    updated: list[uuid.UUID]
    distiller: str
    distilled_at: datetime


class UserExport(BaseModel):
    """Everything kept about one user of the tenant."""

    format: Literal["lectern.user-export.v1"] = EXPORT_FORMAT
    tenant_id: str
    user_id: str
    exported_at: datetime
    sessions: list[ExportedSession]
    quizzes: list[ExportedQuiz]
    quiz_attempts: list[ExportedQuizAttempt]
    feedback_flags: list[ExportedFlag]
    knowledge_gaps: list[ExportedGap]
    notices: list[ExportedNotice]
    usage: list[ExportedUsage]
    classes: list[ExportedClass]
    lms_accounts: list[ExportedLmsAccount] = Field(default_factory=list)
    lms_scores: list[ExportedLmsScore] = Field(default_factory=list)
    documents: list[ExportedDocument]
    memories: list[ExportedMemory]
    quiz_tallies: list[ExportedQuizTally]
    check_runs: list[ExportedCheckRun] = Field(default_factory=list)
    turn_signals: list[ExportedTurnSignal]
    distillations: list[ExportedDistillation]
    events: list[ExportedEvent]


async def export_user(
    *, pool: Pool, broker: NatsBroker, tenant_id: str, user_id: str, timeout: float
) -> UserExport:
    """Everything kept about ``user_id`` in ``tenant_id`` (empty parts for an unknown user);
    the memory service's parts asked of it within ``timeout``."""
    kept = await memories.export(broker, tenant_id=tenant_id, user_id=user_id, timeout=timeout)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                        readonly=True):  # fmt: skip
        rows = await repo.read_user(conn, tenant_id=tenant_id, user_id=user_id)
    sessions = {r["id"]: ExportedSession.model_validate(r) for r in rows.pop("sessions")}
    for message in rows.pop("messages"):
        session = sessions.get(message.pop("session_id"))
        if session is not None:
            session.messages.append(ExportedMessage.model_validate(message))
    return UserExport.model_validate(
        {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "exported_at": datetime.now(UTC),
            "sessions": list(sessions.values()),
            **rows,
            **kept.model_dump(
                include={
                    "memories",
                    "quiz_tallies",
                    "check_runs",
                    "turn_signals",
                    "distillations",
                }
            ),
        }
    )
