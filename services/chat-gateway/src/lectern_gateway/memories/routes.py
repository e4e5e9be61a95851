"""A student's long-term memories: list and forget (admins: for any user of their tenant)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response

from lectern_gateway.auth import AdminDep, PrincipalDep
from lectern_gateway.deps import PoolDep
from lectern_gateway.memories.service import (
    Forgotten,
    Memory,
    delete_all,
    delete_one,
    list_memories,
)

router = APIRouter(tags=["memories"])


@router.get("/v1/me/memories", summary="My long-term memories, newest first")
async def my_memories(principal: PrincipalDep, pool: PoolDep) -> list[Memory]:
    return await list_memories(pool, principal.tenant_id, principal.user_id)


@router.delete("/v1/me/memories/{memory_id}", status_code=204, summary="Forget one memory")
async def forget_my_memory(
    memory_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep
) -> Response:
    await delete_one(pool, principal.tenant_id, principal.user_id, memory_id)
    return Response(status_code=204)


@router.delete("/v1/me/memories", summary="Forget everything (recall stops at once)")
async def forget_all_my_memories(principal: PrincipalDep, pool: PoolDep) -> Forgotten:
    return await delete_all(pool, principal.tenant_id, principal.user_id)


@router.get("/v1/users/{user_id}/memories", summary="A user's memories (admins)")
async def user_memories(user_id: str, admin: AdminDep, pool: PoolDep) -> list[Memory]:
    return await list_memories(pool, admin.tenant_id, user_id)


@router.delete("/v1/users/{user_id}/memories/{memory_id}", status_code=204, summary="(admins)")
async def forget_user_memory(
    user_id: str, memory_id: uuid.UUID, admin: AdminDep, pool: PoolDep
) -> Response:
    await delete_one(pool, admin.tenant_id, user_id, memory_id)
    return Response(status_code=204)


@router.delete("/v1/users/{user_id}/memories", summary="Forget all of a user's memories (admins)")
async def forget_all_user_memories(user_id: str, admin: AdminDep, pool: PoolDep) -> Forgotten:
    return await delete_all(pool, admin.tenant_id, user_id)
