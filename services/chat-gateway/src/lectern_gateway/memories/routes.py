"""A student's long-term memories: list and forget (admins: for any user of their tenant).

The memory service keeps them; ``service`` asks it over NATS (503 when it cannot answer)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response

from lectern_gateway.auth import AdminDep, PrincipalDep
from lectern_gateway.deps import BrokerDep, SettingsDep
from lectern_gateway.memories.service import (
    Forgotten,
    Memory,
    delete_all,
    delete_one,
    list_memories,
)

router = APIRouter(tags=["memories"])


@router.get("/v1/me/memories", summary="My long-term memories, newest first")
async def my_memories(
    principal: PrincipalDep, broker: BrokerDep, settings: SettingsDep
) -> list[Memory]:
    return await list_memories(
        broker, tenant_id=principal.tenant_id, user_id=principal.user_id,
        timeout=settings.request_timeout_s,
    )  # fmt: skip


@router.delete("/v1/me/memories/{memory_id}", status_code=204, summary="Forget one memory")
async def forget_my_memory(
    memory_id: uuid.UUID, principal: PrincipalDep, broker: BrokerDep, settings: SettingsDep
) -> Response:
    await delete_one(
        broker, tenant_id=principal.tenant_id, user_id=principal.user_id, memory_id=memory_id,
        timeout=settings.request_timeout_s,
    )  # fmt: skip
    return Response(status_code=204)


@router.delete("/v1/me/memories", summary="Forget everything (recall stops at once)")
async def forget_all_my_memories(
    principal: PrincipalDep, broker: BrokerDep, settings: SettingsDep
) -> Forgotten:
    return await delete_all(
        broker, tenant_id=principal.tenant_id, user_id=principal.user_id,
        timeout=settings.request_timeout_s,
    )  # fmt: skip


@router.get("/v1/users/{user_id}/memories", summary="A user's memories (admins)")
async def user_memories(
    user_id: str, admin: AdminDep, broker: BrokerDep, settings: SettingsDep
) -> list[Memory]:
    return await list_memories(
        broker, tenant_id=admin.tenant_id, user_id=user_id, timeout=settings.request_timeout_s
    )


@router.delete("/v1/users/{user_id}/memories/{memory_id}", status_code=204, summary="(admins)")
async def forget_user_memory(
    user_id: str, memory_id: uuid.UUID, admin: AdminDep, broker: BrokerDep, settings: SettingsDep
) -> Response:
    await delete_one(
        broker, tenant_id=admin.tenant_id, user_id=user_id, memory_id=memory_id,
        timeout=settings.request_timeout_s,
    )  # fmt: skip
    return Response(status_code=204)


@router.delete("/v1/users/{user_id}/memories", summary="Forget all of a user's memories (admins)")
async def forget_all_user_memories(
    user_id: str, admin: AdminDep, broker: BrokerDep, settings: SettingsDep
) -> Forgotten:
    return await delete_all(
        broker, tenant_id=admin.tenant_id, user_id=user_id, timeout=settings.request_timeout_s
    )
