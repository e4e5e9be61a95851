"""Export and erasure of a user's data: a student exports their own; admins export and erase
any user of their tenant."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from lectern_gateway.auth import AdminDep, PrincipalDep
from lectern_gateway.deps import GatewayDep
from lectern_gateway.privacy.erasure import erase_user
from lectern_gateway.privacy.export import UserExport, export_user
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["privacy"])

UserId = Annotated[str, Path(min_length=1, max_length=128, description="the user's id (`sub`)")]


class ErasureOut(BaseModel):
    """What an erasure did."""

    user_id: str
    event_id: uuid.UUID = Field(description="the `users.erased` event (the erasure's id)")
    erased_at: datetime
    erased: dict[str, int] = Field(
        description="rows this request deleted, by table (quality_gap_topics: counted down)"
    )
    memory_pending: bool = Field(
        description="the memory service still keeps rows of the user: it erases them when it "
        "consumes `users.erased` (within moments while it runs)"
    )
    already_erased: bool = Field(
        description="nothing was left: the user had been erased (this is that erasure)"
    )


@router.get("/v1/me/export", summary="Everything kept about me, as one JSON document")
async def export_me(principal: PrincipalDep, gateway: GatewayDep) -> UserExport:
    return await export_user(
        pool=gateway.pool, broker=gateway.broker, tenant_id=principal.tenant_id,
        user_id=principal.user_id, timeout=gateway.settings.request_timeout_s,
    )  # fmt: skip


@router.get(
    "/v1/users/{user_id}/export", summary="Everything kept about a user of the tenant (admins)"
)
async def export_a_user(user_id: UserId, admin: AdminDep, gateway: GatewayDep) -> UserExport:
    return await export_user(
        pool=gateway.pool, broker=gateway.broker, tenant_id=admin.tenant_id, user_id=user_id,
        timeout=gateway.settings.request_timeout_s,
    )  # fmt: skip


@router.delete(
    "/v1/users/{user_id}",
    status_code=202,
    summary="Erase everything kept about a user of the tenant (admins)",
    response_description="erased: the gateway's rows are gone, `users.erased` is on its way",
    responses={
        200: {
            "model": ErasureOut,
            "description": "already erased: nothing was left, nothing is published",
        },
        404: {"description": "nothing to erase, and the user was never erased (problem+json)"},
    },
)
async def erase_a_user(
    user_id: UserId, admin: AdminDep, gateway: GatewayDep, response: Response
) -> ErasureOut:
    """202: the gateway's rows are gone and `users.erased` is on its way (the memory service
    erases its rows when it consumes it). 200: the user was erased before and nothing is left.
    404 (problem+json): nothing to erase, and the user was never erased."""
    erasure = await erase_user(
        pool=gateway.pool, broker=gateway.broker, tenant_id=admin.tenant_id, user_id=user_id,
        erased_by=admin.user_id, timeout=gateway.settings.memory_timeout_s,
    )  # fmt: skip
    if erasure is None:
        raise ProblemError(404, "Not found", f"nothing to erase for user {user_id!r}")
    if erasure.already_erased:
        response.status_code = 200
    return ErasureOut(
        user_id=user_id,
        event_id=erasure.event.event_id,
        erased_at=erasure.event.occurred_at,
        erased=erasure.erased,
        memory_pending=erasure.memory_pending,
        already_erased=erasure.already_erased,
    )
