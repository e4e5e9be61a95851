"""A student's long-term memories as the gateway reads and forgets them (no HTTP in here).

The rows are the memory service's: the gateway asks it over NATS request/reply
(``lectern.memory.list.v1``, ``.forget.v1``, ``.topics.v1``, ``.export.v1``) and never
reads its tables (docs/architecture.md, "Who owns which data"). NATS down, or no memory
replica answering in time, raises ``NatsUnavailableError`` / ``UpstreamError``: 503
problem+json naming the cause.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from faststream.nats import NatsBroker
from pydantic import BaseModel, Field

from lectern_common.broker import request
from lectern_common.errors import RetryableError
from lectern_common.events import MemoryEvidence, MemoryTopic
from lectern_common.events import memory as mem
from lectern_common.events.memory import MemoryKind
from lectern_gateway.problems import ProblemError

log = logging.getLogger(__name__)

#: a quiz focuses on at most this many of a student's struggle topics
FOCUS_TOPICS = 20


class Evidence(MemoryEvidence):
    """One thing the student said or did that a memory rests on."""


class Memory(BaseModel):
    """One long-term memory, with the evidence behind it (newest last) and that evidence in
    a few words ("answered 2 checks right on 26 Nov")."""

    id: uuid.UUID
    kind: Literal["takeaway", "struggle", "mastered", "preference"]
    text: str
    topic: str | None
    strength: float
    source_session_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    evidence: list[Evidence] = Field(default_factory=list)
    because: str = ""


class Forgotten(BaseModel):
    """How many memories were deleted."""

    deleted: int


_SAID = {
    "check_right": "answered {n} check{s} right",
    "check_wrong": "got {n} check{s} wrong",
    "check_partly": "answered {n} check{s} partly",
    "check_skipped": "skipped {n} check{s}",
    "quiz_right": "answered {n} quiz question{s} right",
    "quiz_wrong": "got {n} quiz question{s} wrong",
    "said": "said so {n} time{s}",
    "repeated": "asked again",
    "flagged": "flagged {n} answer{s}",
    "gap": "asked beyond the material",
}


def because(evidence: list[Evidence]) -> str:
    """The evidence in a few words: what happened, how often, and the last day it did."""
    counts: dict[str, list[str]] = {}
    for item in evidence:
        counts.setdefault(item.kind, []).append(item.at)
    parts = []
    for kind, times in counts.items():
        template = _SAID.get(kind, kind.replace("_", " "))
        n = len(times)
        phrase = template.format(n=n, s="" if n == 1 else "s")
        days = sorted(t for t in times if t)
        if days:
            when = datetime.fromisoformat(days[-1])
            phrase += f" on {when.day} {when:%b}"
        parts.append(phrase)
    return "; ".join(parts)


async def list_memories(
    broker: NatsBroker,
    *,
    tenant_id: str,
    user_id: str,
    timeout: float,
    kinds: Sequence[MemoryKind] = (),
) -> list[Memory]:
    """A user's memories (of ``kinds``; empty: all), newest first, each with its evidence in
    a few words."""
    reply = await request(
        broker,
        mem.MemoryListRequest(tenant_id=tenant_id, user_id=user_id, kinds=list(kinds)),
        mem.MemoryListReply,
        timeout=timeout,
    )
    out = []
    for stored in reply.memories:
        memory = Memory.model_validate(stored.model_dump())
        memory.because = because(memory.evidence)
        out.append(memory)
    return out


async def delete_one(
    broker: NatsBroker, *, tenant_id: str, user_id: str, memory_id: uuid.UUID, timeout: float
) -> None:
    """Forget one memory of the user (404 problem when the user has none of that id)."""
    reply = await request(
        broker,
        mem.MemoryForgetRequest(tenant_id=tenant_id, user_id=user_id, memory_id=memory_id),
        mem.MemoryForgetReply,
        timeout=timeout,
    )
    if reply.deleted == 0:
        raise ProblemError(404, "Not found", f"no memory {memory_id}")


async def delete_all(
    broker: NatsBroker, *, tenant_id: str, user_id: str, timeout: float
) -> Forgotten:
    """Forget every memory of the user."""
    reply = await request(
        broker,
        mem.MemoryForgetRequest(tenant_id=tenant_id, user_id=user_id),
        mem.MemoryForgetReply,
        timeout=timeout,
    )
    return Forgotten(deleted=reply.deleted)


async def topics(
    broker: NatsBroker,
    *,
    tenant_id: str,
    user_ids: Sequence[str],
    timeout: float,
    kind: MemoryKind = "struggle",
    min_users: int = 1,
    limit: int = 100,
) -> list[MemoryTopic]:
    """Topics of ``kind`` memories over ``user_ids`` that at least ``min_users`` of them
    have, by users then evidence (never which users)."""
    if not user_ids:
        return []
    reply = await request(
        broker,
        mem.MemoryTopicsRequest(
            tenant_id=tenant_id, user_ids=list(user_ids), kind=kind, min_users=min_users,
            limit=limit,
        ),
        mem.MemoryTopicsReply,
        timeout=timeout,
    )  # fmt: skip
    return reply.topics


async def struggle_topics(
    broker: NatsBroker, *, tenant_id: str, user_id: str, timeout: float
) -> list[str]:
    """Topics the student struggles with, strongest first, for a quiz to start with; none
    when the memory service does not answer within ``timeout`` (the quiz is drawn without
    that focus, as a chat turn goes on without recall)."""
    try:
        found = await topics(
            broker, tenant_id=tenant_id, user_ids=[user_id], timeout=timeout,
            limit=FOCUS_TOPICS * 5,
        )  # fmt: skip
    except RetryableError as exc:  # NATS down, no replica answering, or its error
        log.info("quiz drawn without struggle topics: %s", exc.message)
        return []
    ranked = sorted(found, key=lambda t: (-t.strength, t.topic))
    return [t.topic for t in ranked[:FOCUS_TOPICS]]


async def export(
    broker: NatsBroker, *, tenant_id: str, user_id: str, timeout: float
) -> mem.MemoryExportReply:
    """Every row the memory service keeps about the user, for their export (and to know
    whether it still keeps any, for an erasure)."""
    return await request(
        broker,
        mem.MemoryExportRequest(tenant_id=tenant_id, user_id=user_id),
        mem.MemoryExportReply,
        timeout=timeout,
    )
