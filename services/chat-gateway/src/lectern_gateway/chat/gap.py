"""Step 3a, gap: no material good enough; say so honestly, record the knowledge gap."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from pydantic import BaseModel

from lectern_common.events import KnowledgeGapDetected
from lectern_common.outbox import enqueue
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.confidence import in_band
from lectern_gateway.chat.context import guess_topic
from lectern_gateway.chat.prompt import knowledge_gap_message
from lectern_gateway.chat.record import turn_completed
from lectern_gateway.chat.sse import (
    ConfidenceEvent,
    DoneEvent,
    TokenEvent,
)
from lectern_gateway.chat.turn import ChatDeps, Retrieved, TurnInput


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
    yield TokenEvent(text=text, origin="gateway")
    confidence = in_band(retrieved.confidence, deps.settings.band_thresholds())
    yield ConfidenceEvent(**confidence.model_dump())
    message_id, gap_id = uuid.uuid4(), uuid.uuid4()
    async with deps.pool.acquire() as conn, conn.transaction():
        await repo.insert_message(
            pool=conn,
            message_id=message_id,
            session_id=session["id"],
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            role="assistant",
            content=text,
            confidence=confidence.score,
            band="gap",
            answered_by="gap",
            timings=timings,
        )
        await repo.insert_gap(
            pool=conn,
            gap_id=gap_id,
            tenant_id=principal.tenant_id,
            session_id=session["id"],
            user_id=principal.user_id,
            question=question,
            topic=topic,
            subject=session.get("subject"),
            confidence=confidence.score,
            message_id=message_id,
            related=related,
        )
        await enqueue(
            conn,
            KnowledgeGapDetected(
                tenant_id=principal.tenant_id,
                gap_id=gap_id,
                session_id=session["id"],
                user_id=principal.user_id,
                question=question,
                topic=topic,
                subject_area=session.get("subject"),
                confidence=confidence.score,
            ),
        )
        await enqueue(
            conn,
            turn_completed(
                turn, user_message_id, message_id, text, confidence, [], "gap", topic=topic
            ),
        )
    yield DoneEvent(
        message_id=message_id,
        user_message_id=user_message_id,
        session_id=session["id"],
        citations=[],
        band="gap",
        confidence=confidence.score,
        knowledge_gap=True,
        answered_by="gap",
        timings_ms=timings,
    )
