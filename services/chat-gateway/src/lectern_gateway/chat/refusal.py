"""A refusal's parts: its words, the knowledge gap it records, and the web answer a tenant may
add (the turn's steps are in ``chat.service``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

import anyio
from pydantic import BaseModel

from lectern_common.db.types import Connection
from lectern_common.errors import LecternError
from lectern_common.events import KnowledgeGapDetected
from lectern_common.outbox import enqueue
from lectern_gateway.chat import generators
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.prompt import build_prompt, knowledge_gap_message
from lectern_gateway.chat.sse import (
    Citation,
    CitationEvent,
    TokenEvent,
)
from lectern_gateway.chat.streamer import Finished, Grounding, ModelUsage, TextDelta
from lectern_gateway.chat.turn_input import ChatDeps, TurnInput
from lectern_gateway.index import scope_chunks
from lectern_gateway.personas.service import scope_collections

log = logging.getLogger(__name__)


async def gap_text(deps: ChatDeps, turn: TurnInput, question: str, related: list[str]) -> str:
    """What a refusal says: the material does not answer, the ``related`` topics it has; a
    persona's own words, or that the persona has no material in its scope at all."""
    text = knowledge_gap_message(question=question, related_topics=related)
    persona = turn.persona
    if persona is None:
        return text
    in_scope = await scope_chunks(
        deps.broker, deps.settings, turn.principal.tenant_id, persona.scope_filter(),
        scope_collections(persona.scope),
    )  # fmt: skip
    if in_scope == 0:
        # never silently empty: the tutor says its material is missing
        return (
            f"{persona.display_name} has no course material in its scope yet, so I "
            "can't answer from your sources. I've flagged this for your teacher."
        )
    if persona.gap_message:
        text = persona.gap_message
        if related:
            text += "\n- Related topics I do have material on: " + ", ".join(related) + "."
    return text


async def record_gap(
    conn: Connection,
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
        pool=conn, gap_id=gap_id, tenant_id=principal.tenant_id, session_id=session.id,
        user_id=principal.user_id, question=question, topic=topic,
        subject=session.subject, confidence=confidence, message_id=message_id,
        related=[t for t in related if t != topic],
    )  # fmt: skip
    await enqueue(
        conn,
        KnowledgeGapDetected(
            tenant_id=principal.tenant_id, gap_id=gap_id, session_id=session.id,
            user_id=principal.user_id, question=question, topic=topic,
            subject_area=session.subject, confidence=confidence,
        ),
    )  # fmt: skip


WEB_HEADING = "\n\nFrom the web (not your course material):\n\n"


@dataclass
class WebPart:
    """The web answer appended to a gap turn: its text (labels inserted) and citations."""

    text: str = ""
    citations: list[Citation] = field(default_factory=list)
    usage: ModelUsage | None = None


async def web_answer(
    deps: ChatDeps, turn: TurnInput, question: str, *, offset: int, into: WebPart
) -> AsyncGenerator[BaseModel, None]:
    """Ask the model to answer from a web search alone; stream it after a heading.

    Its spans are cited [W#] (web citations carry offsets in the whole message, which
    begins ``offset`` characters earlier). Nothing is added when the model fails or finds
    no web source: the honest gap message stands alone.
    """
    system = turn.system_prompt(memories=[], with_sources=False)
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
            elif isinstance(piece, Grounding):
                sources.extend(web_citations(piece))
                supports.extend(spans_of(piece))
            elif isinstance(piece, Finished):
                into.usage = piece.usage
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
    into.text = WEB_HEADING + generators.insert_labels(model_text, marks)


def web_citations(grounding: Grounding) -> list[Citation]:
    """The web pages a model's search found, as citations [W#] (no span yet)."""
    return [
        Citation(label=s.label, kind="web", url=s.uri, title=s.title) for s in grounding.sources
    ]


def spans_of(grounding: Grounding) -> list[tuple[int, int, str, list[str]]]:
    """The answer's spans (start, end, text) and the labels of the web pages supporting each."""
    return [(s.start, s.end, s.text, list(s.sources)) for s in grounding.supports]
