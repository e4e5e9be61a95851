"""Record: ``chat.turn.completed`` for the memory service and anyone else, written to
the outbox in the transaction that stores the answer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from lectern_common.db.types import Connection
from lectern_common.events import (
    ChatTurnCompleted,
    Confidence,
)
from lectern_common.events.chat import CitationRef
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.sse import Citation
from lectern_gateway.chat.turn_input import TurnInput, TurnTakenOver


async def claim_answer(conn: Connection, turn: TurnInput, message_id: uuid.UUID) -> uuid.UUID:
    """The id of the turn's answer, claimed in the transaction that stores it: ``message_id``
    when this run stores it now, another when an earlier run of the turn stored it (the caller
    then writes nothing). Raises :class:`TurnTakenOver` when another run owns the turn."""
    if turn.owner is None or turn.message_id is None:
        return message_id
    claimed = await repo.claim_turn_answer(
        pool=conn, turn_id=turn.message_id, owner=turn.owner, answer_id=message_id
    )
    if claimed is None:
        raise TurnTakenOver(str(turn.message_id))
    return uuid.UUID(str(claimed))


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
    knowledge_gap: bool = False,
) -> ChatTurnCompleted:
    """The event of a completed turn; a knowledge gap is the gap band's, or one the answer
    itself said the material does not answer (``knowledge_gap``)."""
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
        session_id=turn.session.id,
        user_id=turn.principal.user_id,
        user_message_id=user_message_id,
        assistant_message_id=message_id,
        mode=turn.session.mode,
        question=turn.text,
        answer=answer,
        confidence=confidence.score,
        band=confidence.band,
        knowledge_gap=confidence.band == "gap" or knowledge_gap,
        citations=refs,
        answered_by=answered_by,
        topic=topic or turn.session.module_tag,
        topics=list(topics),
    )
