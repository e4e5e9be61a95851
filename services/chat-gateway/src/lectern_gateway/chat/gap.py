"""Step 3a, gap: no material good enough; say so honestly, record the knowledge gap."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from lectern_common import llm
from lectern_common.errors import LecternError
from lectern_common.events import KnowledgeGapDetected
from lectern_common.outbox import enqueue
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.confidence import in_band
from lectern_gateway.chat.context import guess_topic
from lectern_gateway.chat.generation import Finished, TextDelta, WebGrounding
from lectern_gateway.chat.prompt import build_prompt, knowledge_gap_message, system_prompt
from lectern_gateway.chat.record import claim_answer, turn_completed
from lectern_gateway.chat.sse import (
    Citation,
    CitationEvent,
    ConfidenceEvent,
    DoneEvent,
    TokenEvent,
)
from lectern_gateway.chat.turn import ChatDeps, Retrieved, TurnInput
from lectern_gateway.personas import repository as persona_repo
from lectern_gateway.personas.service import persona_label, persona_prompt
from lectern_gateway.quality import aggregates as quality

log = logging.getLogger(__name__)


async def gap_turn(
    deps: ChatDeps,
    turn: TurnInput,
    question: str,
    retrieved: Retrieved,
    user_message_id: uuid.UUID,
    timings: dict[str, float],
) -> AsyncIterator[BaseModel]:
    principal, session = turn.principal, turn.session
    related = await repo.related_topics(
        pool=deps.pool, tenant_id=principal.tenant_id, subject=session.get("subject"), limit=5
    )
    topic = guess_topic(question, session, [])
    related = [t for t in related if t != topic][:5]
    text = knowledge_gap_message(question=question, related_topics=related)
    persona = turn.persona
    if persona is not None:
        scope = persona.get("scope") or {}
        if not await persona_repo.indexed_chunks(
            deps.pool, tenant_id=principal.tenant_id, scope=scope
        ):
            # never silently empty: the tutor says its material is missing
            text = (
                f"{persona['display_name']} has no course material in its scope yet, so I "
                "can't answer from your sources. I've flagged this for your teacher."
            )
        elif persona.get("gap_message"):
            text = str(persona["gap_message"])
            if related:
                text += "\n- Related topics I do have material on: " + ", ".join(related) + "."
    yield TokenEvent(text=text, origin="gateway")
    web = WebPart()
    if turn.web_search and deps.web_streamer is not None:
        # no course material: what the web says, cited [W#] and set apart from the course
        async for event in web_answer(deps, turn, question, offset=len(text), into=web):
            yield event
        text += web.text
    confidence = in_band(retrieved.confidence, turn.bands(deps.settings))
    yield ConfidenceEvent(**confidence.model_dump())
    message_id, gap_id = uuid.uuid4(), uuid.uuid4()
    async with deps.pool.acquire() as conn, conn.transaction():
        stored = await claim_answer(conn, turn, message_id)
        if stored == message_id:  # else an earlier run of this turn stored it
            await repo.insert_message(
                pool=conn,
                message_id=message_id,
                session_id=session["id"],
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                role="assistant",
                content=text,
                citations=repo.citations_json(web.citations),
                confidence=confidence.score,
                band="gap",
                answered_by="gap",
                usage=web.usage,
                timings=timings,
            )
            await record_gap(
                conn, turn, gap_id=gap_id, question=question, topic=topic,
                confidence=confidence.score, message_id=message_id, related=related,
            )  # fmt: skip
            await quality.record_turn(
                conn,
                quality.Dimensions.of_session(principal.tenant_id, session),
                band="gap",
                cited_documents=[],
                fallback=bool(web.usage.get("fallback_from")),
                ttft_ms=timings.get("first_token_ms"),
                retrieval_ms=timings.get("retrieve_ms"),
                gap_topic=topic,
            )
            await enqueue(
                conn,
                turn_completed(
                    turn,
                    user_message_id,
                    message_id,
                    text,
                    confidence,
                    web.citations,
                    "gap",
                    topic=topic,
                ),
            )
    message_id = stored
    yield DoneEvent(
        message_id=message_id,
        user_message_id=user_message_id,
        session_id=session["id"],
        citations=web.citations,
        band="gap",
        confidence=confidence.score,
        knowledge_gap=True,
        answered_by="gap",
        persona=persona_label(turn.persona),
        timings_ms=timings,
    )


async def record_gap(
    conn: Any,
    turn: TurnInput,
    *,
    gap_id: uuid.UUID,
    question: str,
    topic: str | None,
    confidence: float,
    message_id: uuid.UUID,
    related: Sequence[str],
) -> None:
    """A question the material does not answer, for the teacher's gap report (with the
    ``related`` topics there is material on, other than its own) and
    ``knowledge_gap.detected`` (inside the transaction that stores the answer)."""
    principal, session = turn.principal, turn.session
    await repo.insert_gap(
        pool=conn, gap_id=gap_id, tenant_id=principal.tenant_id, session_id=session["id"],
        user_id=principal.user_id, question=question, topic=topic,
        subject=session.get("subject"), confidence=confidence, message_id=message_id,
        related=[t for t in related if t != topic],
    )  # fmt: skip
    await enqueue(
        conn,
        KnowledgeGapDetected(
            tenant_id=principal.tenant_id, gap_id=gap_id, session_id=session["id"],
            user_id=principal.user_id, question=question, topic=topic,
            subject_area=session.get("subject"), confidence=confidence,
        ),
    )  # fmt: skip


WEB_HEADING = "\n\nFrom the web (not your course material):\n\n"


@dataclass
class WebPart:
    """The web answer appended to a gap turn: its text (labels inserted) and citations."""

    text: str = ""
    citations: list[Citation] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)


async def web_answer(
    deps: ChatDeps, turn: TurnInput, question: str, *, offset: int, into: WebPart
) -> AsyncIterator[BaseModel]:
    """Ask the model to answer from a web search alone; stream it after a heading.

    Its spans are cited [W#] (web citations carry offsets in the whole message, which
    begins ``offset`` characters earlier). Nothing is added when the model fails or finds
    no web source: the honest gap message stands alone.
    """
    session = turn.session
    system = system_prompt(
        mode=session["mode"],
        learning_style=session.get("learning_style"),
        explanation_depth=session.get("explanation_depth"),
        grade_level=session.get("grade_level"),
        memories=[],
        with_sources=False,
        persona=persona_prompt(turn.persona),
    )
    prompt = build_prompt(
        system=system,
        question=question,
        history=[],
        sources=[],
        budget=deps.settings.context_token_budget,
    )
    prompt.web_search = True
    model_text = ""
    sources: list[Citation] = []
    supports: list[tuple[int, int, str, list[str]]] = []
    heading_sent = False
    assert deps.web_streamer is not None
    stream = deps.web_streamer(prompt)
    try:
        async for piece in stream:
            if isinstance(piece, TextDelta) and piece.text:
                if not heading_sent:
                    heading_sent = True
                    yield TokenEvent(text=WEB_HEADING, origin="gateway")
                model_text += piece.text
                yield TokenEvent(text=piece.text)
            elif isinstance(piece, WebGrounding):
                for label, uri, title in piece.sources:
                    sources.append(Citation(label=label, kind="web", url=uri, title=title))
                supports.extend(piece.supports)
            elif isinstance(piece, Finished):
                into.usage = dict(piece.usage)
    except LecternError as exc:
        log.warning("web answer to a gap failed: %s", exc.message)
        if heading_sent:  # what was shown is stored, without web sources
            into.text = WEB_HEADING + model_text
        return
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
    if not heading_sent:
        return
    start = offset + len(WEB_HEADING)
    by_label = {c.label: c for c in sources}
    into.citations = list(sources)
    for first, end, span, labels in supports:
        for label in labels:
            if label in by_label:
                into.citations.append(
                    by_label[label].model_copy(
                        update={"span_start": start + first, "span_end": start + end, "text": span}
                    )
                )
    for citation in into.citations:
        yield CitationEvent(citation=citation)
    marks = [(end, labels) for _, end, _, labels in supports]
    into.text = WEB_HEADING + llm.insert_labels(model_text, marks)
