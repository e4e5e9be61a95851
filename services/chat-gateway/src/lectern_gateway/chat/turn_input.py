"""What a turn is given and shares: the gateway's dependencies, the question, the
chosen sources; and the small helpers every step uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from faststream.nats import NatsBroker
from pydantic import BaseModel, ConfigDict, Field

from lectern_answerer import SentenceReader
from lectern_common.broker import publish_event
from lectern_common.db.types import Pool
from lectern_common.education import BandThresholds
from lectern_common.embeddings import Embedder
from lectern_common.events import Confidence
from lectern_common.events.base import Event
from lectern_gateway.auth import Principal
from lectern_gateway.chat.decision import no_material
from lectern_gateway.chat.prompt import Mode, system_prompt
from lectern_gateway.chat.sse import Source
from lectern_gateway.chat.streamer import AnswerStreamer
from lectern_gateway.config import Settings
from lectern_gateway.personas.service import TutorPersona
from lectern_gateway.study.model_writer import GeminiQuizWriter


@dataclass
class ChatDeps:
    """What a turn needs from the running gateway."""

    pool: Pool
    broker: NatsBroker
    settings: Settings
    streamer: AnswerStreamer
    #: the models that can search the web (Gemini), when configured
    web_streamer: AnswerStreamer | None = None
    #: judges typed replies to check questions (Gemini), when configured
    quiz_writer: GeminiQuizWriter | None = None
    #: the local embedding model (cosine of a reply and its answer), when loaded
    embedder: Embedder | None = None
    #: the packaged reader (which cited sentence a check question asks about), when loaded
    reader: SentenceReader | None = None


@dataclass(frozen=True)
class ChatSession:
    """The session a turn is asked in, as the turn reads it (from its ``chat_sessions`` row,
    once per turn)."""

    id: uuid.UUID
    mode: Mode
    subject: str | None = None
    module_tag: str | None = None
    class_id: str | None = None
    grade_level: int | None = None
    learning_style: str | None = None
    explanation_depth: str | None = None
    curriculum_standards: tuple[str, ...] = ()
    persona_slug: str | None = None
    persona_version: int | None = None

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> ChatSession:
        """The session of a ``chat_sessions`` row."""
        return cls(
            id=row["id"], mode=row["mode"], subject=row.get("subject"),
            module_tag=row.get("module_tag"), class_id=row.get("class_id"),
            grade_level=row.get("grade_level"), learning_style=row.get("learning_style"),
            explanation_depth=row.get("explanation_depth"),
            curriculum_standards=tuple(row.get("curriculum_standards") or ()),
            persona_slug=row.get("persona_slug"), persona_version=row.get("persona_version"),
        )  # fmt: skip


class TutorCheck(BaseModel):
    """A check question (tutor) or practice question (drill), as stored with the assistant
    message that asked it (``chat_messages.tutor_check``, JSON): ``pending`` until judged or
    skipped, when settling merges ``verdict``, ``reply`` and ``judged_by`` into it (read back
    here as extra fields, ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    question_id: str
    kind: str
    prompt: str
    answer: str
    accepted: list[str] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list)
    evidence: str = ""
    #: what it tests: the student's question's topic, else the section it comes from
    topic: str = ""
    chunk_id: uuid.UUID
    document_id: uuid.UUID
    title: str
    section: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    status: str = "pending"

    def stored(self) -> dict[str, Any]:
        """The JSON stored in ``chat_messages.tutor_check``."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class PendingCheck:
    """A check question waiting for the student's answer, and the message that asked it."""

    check: TutorCheck
    message_id: uuid.UUID

    @classmethod
    def of_message(cls, message_id: uuid.UUID, role: str, stored: Any) -> PendingCheck | None:
        """The check a stored message asked (``chat_messages.tutor_check``), when it is an
        assistant's and still pending; else None."""
        if role != "assistant" or not isinstance(stored, dict):
            return None
        if stored.get("status") != "pending":
            return None
        return cls(TutorCheck.model_validate(stored), message_id)


@dataclass(frozen=True)
class HistoryRow:
    """A message of the session before the turn's question, as the turn reads it."""

    id: uuid.UUID
    role: Literal["user", "assistant"]
    content: str
    confidence_band: str | None = None
    #: the documents its valid textbook citations name, in citation order
    cited_document_ids: tuple[uuid.UUID, ...] = ()
    #: its check question as stored (``chat_messages.tutor_check``)
    tutor_check: dict[str, Any] | None = None

    def pending_check(self) -> PendingCheck | None:
        """The check question this message asked, when it is still waiting for an answer."""
        return PendingCheck.of_message(self.id, self.role, self.tutor_check)

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> HistoryRow:
        """The message of a ``chat_messages`` row."""
        return cls(
            id=row["id"], role=row["role"], content=str(row["content"]),
            confidence_band=row.get("confidence_band"),
            cited_document_ids=tuple(_document_ids(row.get("citations") or [])),
            tutor_check=row.get("tutor_check"),
        )  # fmt: skip


def _document_ids(citations: list[Any]) -> list[uuid.UUID]:
    """The distinct documents stored citations name (web citations and bad ids aside)."""
    found: list[uuid.UUID] = []
    for citation in citations:
        raw = citation.get("document_id") if isinstance(citation, dict) else None
        try:
            document_id = uuid.UUID(str(raw)) if raw else None
        except ValueError:
            continue
        if document_id is not None and document_id not in found:
            found.append(document_id)
    return found


@dataclass
class TurnInput:
    """One question in one session."""

    principal: Principal
    session: ChatSession
    text: str
    delay_s: float = 0.0
    #: the question's message id (also the turn's id); a new one when not given
    message_id: uuid.UUID | None = None
    #: the tenant lets the model search the web (tenant setting, else the gateway default)
    web_search: bool = False
    #: the session's tutor persona (the version it started with), if any
    persona: TutorPersona | None = None
    #: the persona's confidence band cut-offs (None: the deployment's)
    thresholds: BandThresholds | None = None
    #: the run answering the turn (its ``chat_turns.owner``): the answer is stored only
    #: while it still owns the turn (None: a turn without a row, e.g. a gap re-try)
    owner: uuid.UUID | None = None
    #: answered again by a replica that took the turn over: the question is stored already
    resumed: bool = False

    def bands(self, settings: Settings) -> BandThresholds:
        """The band cut-offs of this turn: the persona's, else the deployment's."""
        return self.thresholds or settings.band_thresholds()

    @property
    def persona_label(self) -> str | None:
        """``slug@version`` of the persona that answers, or None."""
        return None if self.persona is None else self.persona.label

    def system_prompt(self, *, memories: list[str], with_sources: bool) -> str:
        """The turn's system prompt: its session's mode and student profile, its persona."""
        session = self.session
        return system_prompt(
            mode=session.mode, learning_style=session.learning_style,
            explanation_depth=session.explanation_depth, grade_level=session.grade_level,
            memories=memories, with_sources=with_sources,
            persona=None if self.persona is None else self.persona.prompt,
        )  # fmt: skip


class TurnTakenOver(Exception):
    """Raised where a run would store its answer after another replica took its turn over
    (this replica was thought dead); the run stops without storing anything."""


@dataclass
class Retrieved:
    """Sources chosen for a turn and the confidence prior."""

    sources: list[Source] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    topic_tags: list[str] = field(default_factory=list)
    confidence: Confidence = field(default_factory=no_material)
    #: the BM25 idf of the question's words in the tenant's library (from the retriever)
    idf: dict[str, float] = field(default_factory=dict)
    #: False: the re-ranker did not answer, and the sources are the retriever's order
    reranked: bool = True

    def answer_margin(self) -> float | None:
        """The best margin of the sources' answer spans over their null scores (None when
        the re-ranker's reader marked none)."""
        margins = [s.answer.margin for s in self.sources if s.answer is not None]
        return max(margins) if margins else None


async def publish(broker: NatsBroker, event: Event) -> None:
    """Publish an event on its JetStream stream."""
    await publish_event(broker, event)


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
