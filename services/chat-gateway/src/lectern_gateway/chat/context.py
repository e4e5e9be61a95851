"""Step 1, context: the session's filters and collections, the student's context for the
re-ranker, the documents of recent answers, the topic, and the student's memories."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from lectern_common.broker import request
from lectern_common.education import preferred_content_types
from lectern_common.errors import LecternError
from lectern_common.events import (
    MemoryRecallReply,
    MemoryRecallRequest,
    RecalledMemory,
    RetrievalFilters,
    StudentContext,
)
from lectern_common.text import words as text_words
from lectern_gateway.auth import Principal
from lectern_gateway.chat.citations import content_terms
from lectern_gateway.chat.turn_input import ChatDeps, ChatSession, HistoryRow

log = logging.getLogger(__name__)


#: answers whose cited documents the retriever boosts (follow-up questions stay on them)
CITED_TURNS = 3


def collections_for(principal: Principal) -> list[str]:
    """Collections a caller's chat may draw on: never assessments (chat is for learning)."""
    return ["educational"]


def filters_for(session: ChatSession, classes: Sequence[str] | None = None) -> RetrievalFilters:
    """Retrieval filters from the session's subject, module, class and grade.

    A class session draws on its class's material and on material assigned to no class (the
    re-ranker prefers the class teacher's), never on another class's. A student's session
    without a class draws on the student's own ``classes`` and unassigned material (``None``:
    staff, no class limit).
    """
    class_id = session.class_id
    return RetrievalFilters(
        class_ids=None if classes is None or class_id else list(classes),
        collections=["educational"],
        subject=session.subject,
        grade_level=session.grade_level,
        grade_within_one=session.grade_level is not None,
        module_tag=session.module_tag,
        class_id=class_id,
        include_unassigned=class_id is not None or classes is not None,
        include_untagged=True,
        curriculum_standards=list(session.curriculum_standards) or None,
    )


def boost_tags_for(session: ChatSession) -> list[str]:
    """Topic tags the retriever boosts: the session's module."""
    return [session.module_tag] if session.module_tag else []


def cited_documents(rows: Sequence[HistoryRow], *, turns: int = CITED_TURNS) -> list[uuid.UUID]:
    """Documents cited by the session's last ``turns`` answers, most recent first."""
    answers = [r for r in rows if r.role == "assistant"][-turns:]
    found: list[uuid.UUID] = []
    for row in reversed(answers):
        found += [d for d in row.cited_document_ids if d not in found]
    return found


def student_context(
    principal: Principal, session: ChatSession, *, teacher_ids: Sequence[str]
) -> StudentContext:
    """What the re-ranker's educational signals need to know of the asker."""
    style = session.learning_style
    return StudentContext(
        user_id=principal.user_id,
        grade_level=session.grade_level,
        subject=session.subject,
        class_id=session.class_id,
        teacher_ids=list(teacher_ids),
        curriculum_standards=list(session.curriculum_standards),
        learning_style=style,
        preferred_content_types=preferred_content_types(style),
    )


def guess_topic(question: str, session: ChatSession, tags: Sequence[str]) -> str | None:
    """A topic to group a gap under: the material's tag, else the question's key words."""
    if tags:
        return tags[0]
    words = [w for w in text_words(question.lower()) if content_terms(w)]
    key = sorted(dict.fromkeys(words), key=len, reverse=True)[:3]
    if key:
        return " ".join(w for w in words if w in key)[:120]
    return session.module_tag or session.subject


async def recall_memories(
    deps: ChatDeps, *, principal: Principal, query: str
) -> list[RecalledMemory]:
    """Top long-term memories of the student; empty when the memory service is silent."""
    try:
        reply = await request(
            deps.broker,
            MemoryRecallRequest(
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                query=query,
                k=deps.settings.memory_k,
            ),
            MemoryRecallReply,
            timeout=deps.settings.memory_timeout_s,
        )
    except LecternError as exc:
        log.info("memory recall skipped: %s", exc.message)
        return []
    return list(reply.memories[: deps.settings.memory_k])


def previous_question(rows: Sequence[HistoryRow]) -> str:
    """The last question the student asked in the history (``""``: none)."""
    for row in reversed(rows):
        if row.role == "user":
            return row.content
    return ""


def remembered_on(
    remembered: Sequence[RecalledMemory], kind: str, asked_about: Sequence[str]
) -> RecalledMemory | None:
    """The recalled memory of ``kind`` whose topic is one the question is about (either
    names the other: "meiosis" and "mitosis and meiosis"), or None."""
    for memory in remembered:
        topic = (memory.topic or "").casefold()
        if memory.kind != kind or not topic:
            continue
        if any(f" {topic} " in f" {t} " or f" {t} " in f" {topic} " for t in asked_about):
            return memory
    return None
