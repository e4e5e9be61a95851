"""A student's long-term memories as the gateway reads and forgets them (no HTTP in here).

The rows are the memory service's ``user_memories`` table, read here in SQL: the one place
of the gateway that does (docs/architecture.md, "Who owns which data").
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from lectern_gateway.problems import ProblemError


class Evidence(BaseModel):
    """One thing the student said or did that a memory rests on."""

    kind: str = Field(
        description="check_right, check_partly, check_wrong, check_skipped, quiz_right, "
        "quiz_wrong (an answer to a tutor check or a quiz item); said (a statement of "
        "confusion or preference, quoted in detail); repeated, flagged, gap"
    )
    detail: str = ""
    at: str = Field(default="", description="when (ISO 8601), empty when unknown")


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


_COLUMNS = "id, kind, text, topic, strength, source_session_id, created_at, updated_at, evidence"
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


async def list_memories(pool: Any, tenant_id: str, user_id: str) -> list[Memory]:
    """A user's memories, newest first, each with its evidence in a few words."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM user_memories WHERE tenant_id = $1 AND user_id = $2 "  # noqa: S608
        "ORDER BY updated_at DESC",
        tenant_id,
        user_id,
    )
    out = []
    for row in rows:
        memory = Memory.model_validate(dict(row))
        memory.because = because(memory.evidence)
        out.append(memory)
    return out


async def delete_one(pool: Any, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> None:
    deleted = await pool.fetchval(
        "DELETE FROM user_memories WHERE id = $1 AND tenant_id = $2 AND user_id = $3 RETURNING id",
        memory_id,
        tenant_id,
        user_id,
    )
    if deleted is None:
        raise ProblemError(404, "Not found", f"no memory {memory_id}")


async def delete_all(pool: Any, tenant_id: str, user_id: str) -> Forgotten:
    result: str = await pool.execute(
        "DELETE FROM user_memories WHERE tenant_id = $1 AND user_id = $2", tenant_id, user_id
    )
    return Forgotten(deleted=int(result.split()[-1]))
