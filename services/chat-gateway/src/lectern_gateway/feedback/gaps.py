"""Knowledge gaps: questions the material could not answer, grouped by topic (staff)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_gateway.auth import StaffDep
from lectern_gateway.chat import repository as repo
from lectern_gateway.deps import PoolDep

router = APIRouter(tags=["knowledge gaps"])


class GapTopic(BaseModel):
    """The gaps of one topic."""

    topic: str
    count: int
    students: int
    last_seen: datetime
    min_confidence: float
    subjects: list[str] = Field(default_factory=list)
    questions: list[str] = Field(description="latest questions (up to 5)")


@router.get("/v1/knowledge-gaps", summary="Knowledge gaps grouped by topic (staff)")
async def knowledge_gaps(
    staff: StaffDep, pool: PoolDep, limit: int = Query(default=100, ge=1, le=1000)
) -> list[GapTopic]:
    rows = await repo.gaps_by_topic(pool=pool, tenant_id=staff.tenant_id, limit=limit)
    return [GapTopic.model_validate({**r, "subjects": r["subjects"] or []}) for r in rows]
