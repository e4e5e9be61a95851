"""Feedback flags: students flag answers; teachers list and resolve them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_common.events import FeedbackFlagged
from lectern_common.outbox import enqueue
from lectern_gateway.auth import PrincipalDep, StaffDep
from lectern_gateway.chat import repository as repo
from lectern_gateway.deps import PoolDep
from lectern_gateway.feedback.views import FlagView
from lectern_gateway.problems import ProblemError
from lectern_gateway.quality import aggregates as quality

router = APIRouter(tags=["feedback"])

Reason = Literal["incorrect", "unclear", "off_topic", "inappropriate", "missing_source", "other"]


class FlagIn(BaseModel):
    """Why an answer is flagged."""

    reason: Reason
    details: str | None = Field(default=None, max_length=4000)


class Flag(FlagView):
    """A flag on a message."""

    resolution: str | None
    resolved_by: str | None
    created_at: datetime
    resolved_at: datetime | None
    message_content: str | None = None


class Resolution(BaseModel):
    """How a flag was resolved."""

    resolution: str | None = Field(default=None, max_length=4000)


@router.post("/v1/messages/{message_id}/flags", status_code=201, summary="Flag an answer")
async def flag_message(
    message_id: uuid.UUID, body: FlagIn, principal: PrincipalDep, pool: PoolDep
) -> Flag:
    message = await repo.get_message(
        pool=pool, tenant_id=principal.tenant_id, message_id=message_id
    )
    if message is None or (not principal.is_staff and message["user_id"] != principal.user_id):
        raise ProblemError(404, "Not found", f"no message {message_id}")
    session = await repo.get_session(
        pool=pool, tenant_id=principal.tenant_id, session_id=message["session_id"]
    )
    async with pool.acquire() as conn, conn.transaction():
        if session is not None:
            await quality.record_flag(
                conn, quality.Dimensions.of_session(principal.tenant_id, session)
            )
        row = await repo.insert_flag(
            pool=conn,
            values={
                "id": uuid.uuid4(),
                "tenant_id": principal.tenant_id,
                "message_id": message_id,
                "session_id": message["session_id"],
                "user_id": principal.user_id,
                "reason": body.reason,
                "details": body.details,
            },
        )
        await enqueue(
            conn,
            FeedbackFlagged(
                tenant_id=principal.tenant_id,
                flag_id=row["id"],
                message_id=message_id,
                session_id=message["session_id"],
                user_id=principal.user_id,
                reason=body.reason,
                details=body.details,
            ),
        )
    return Flag.model_validate(row)


@router.get("/v1/flags", summary="The tenant's flags, newest first (staff)")
async def list_flags(
    staff: StaffDep,
    pool: PoolDep,
    status: Literal["open", "resolved"] | None = "open",
    limit: int = Query(default=100, ge=1, le=1000),
) -> list[Flag]:
    rows = await repo.list_flags(pool=pool, tenant_id=staff.tenant_id, status=status, limit=limit)
    return [Flag.model_validate(r) for r in rows]


@router.post("/v1/flags/{flag_id}/resolve", summary="Resolve a flag (staff)")
async def resolve_flag(
    flag_id: uuid.UUID, body: Resolution, staff: StaffDep, pool: PoolDep
) -> Flag:
    row = await repo.resolve_flag(
        pool=pool,
        tenant_id=staff.tenant_id,
        flag_id=flag_id,
        resolution=body.resolution,
        resolved_by=staff.user_id,
    )
    if row is None:
        raise ProblemError(404, "Not found", f"no flag {flag_id}")
    return Flag.model_validate(row)
