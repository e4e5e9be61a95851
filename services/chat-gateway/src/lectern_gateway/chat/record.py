"""Step 4, record: ``chat.turn.completed`` for the memory service and anyone else, written to
the outbox in the transaction that stores the answer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from lectern_common.events import (
    ChatTurnCompleted,
    Confidence,
)
from lectern_common.events.chat import CitationRef
from lectern_gateway.chat.sse import Citation
from lectern_gateway.chat.turn import TurnInput


def turn_completed(
    turn: TurnInput,
    user_message_id: uuid.UUID,
    message_id: uuid.UUID,
    answer: str,
    confidence: Confidence,
    citations: Sequence[Citation],
    answered_by: str,
    topic: str | None = None,
    topics: Sequence[str] = (),
) -> ChatTurnCompleted:
    """The event of a completed turn."""
    refs = [
        CitationRef(
            label=c.label,
            chunk_id=c.chunk_id,
            document_id=c.document_id,
            url=c.url,
            title=c.title,
            support=c.support,
        )
        for c in citations
    ]
    return ChatTurnCompleted(
        tenant_id=turn.principal.tenant_id,
        session_id=turn.session["id"],
        user_id=turn.principal.user_id,
        user_message_id=user_message_id,
        assistant_message_id=message_id,
        mode=turn.session["mode"],
        question=turn.text,
        answer=answer,
        confidence=confidence.score,
        band=confidence.band,
        knowledge_gap=confidence.band == "gap",
        citations=refs,
        answered_by=answered_by,
        topic=topic or turn.session.get("module_tag"),
        topics=list(topics),
    )
