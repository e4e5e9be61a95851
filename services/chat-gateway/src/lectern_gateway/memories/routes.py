"""A student's long-term memories: list and forget (admins: for any user of their tenant)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel

from lectern_gateway.auth import AdminDep, PrincipalDep
from lectern_gateway.deps import PoolDep
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["memories"])


class Memory(BaseModel):
    """One long-term memory."""

    id: uuid.UUID
    kind: Literal["takeaway", "struggle", "mastered", "preference"]
    text: str
    topic: str | None
    strength: float
    source_session_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


class Forgotten(BaseModel):
    """How many memories were deleted."""

    deleted: int


_COLUMNS = "id, kind, text, topic, strength, source_session_id, created_at, updated_at"


async def _list(pool: Any, tenant_id: str, user_id: str) -> list[Memory]:
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM user_memories WHERE tenant_id = $1 AND user_id = $2 "  # noqa: S608
        "ORDER BY updated_at DESC",
        tenant_id,
        user_id,
    )
    return [Memory.model_validate(dict(r)) for r in rows]


async def _delete_one(pool: Any, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> None:
    deleted = await pool.fetchval(
        "DELETE FROM user_memories WHERE id = $1 AND tenant_id = $2 AND user_id = $3 RETURNING id",
        memory_id,
        tenant_id,
        user_id,
    )
    if deleted is None:
        raise ProblemError(404, "Not found", f"no memory {memory_id}")


async def _delete_all(pool: Any, tenant_id: str, user_id: str) -> Forgotten:
    result: str = await pool.execute(
        "DELETE FROM user_memories WHERE tenant_id = $1 AND user_id = $2", tenant_id, user_id
    )
    return Forgotten(deleted=int(result.split()[-1]))


@router.get("/v1/me/memories", summary="My long-term memories, newest first")
async def my_memories(principal: PrincipalDep, pool: PoolDep) -> list[Memory]:
    return await _list(pool, principal.tenant_id, principal.user_id)


@router.delete("/v1/me/memories/{memory_id}", status_code=204, summary="Forget one memory")
async def forget_my_memory(
    memory_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep
) -> Response:
    await _delete_one(pool, principal.tenant_id, principal.user_id, memory_id)
    return Response(status_code=204)


@router.delete("/v1/me/memories", summary="Forget everything (recall stops at once)")
async def forget_all_my_memories(principal: PrincipalDep, pool: PoolDep) -> Forgotten:
    return await _delete_all(pool, principal.tenant_id, principal.user_id)


@router.get("/v1/users/{user_id}/memories", summary="A user's memories (admins)")
async def user_memories(user_id: str, admin: AdminDep, pool: PoolDep) -> list[Memory]:
    return await _list(pool, admin.tenant_id, user_id)


@router.delete("/v1/users/{user_id}/memories/{memory_id}", status_code=204, summary="(admins)")
async def forget_user_memory(
    user_id: str, memory_id: uuid.UUID, admin: AdminDep, pool: PoolDep
) -> Response:
    await _delete_one(pool, admin.tenant_id, user_id, memory_id)
    return Response(status_code=204)


@router.delete("/v1/users/{user_id}/memories", summary="Forget all of a user's memories (admins)")
async def forget_all_user_memories(user_id: str, admin: AdminDep, pool: PoolDep) -> Forgotten:
    return await _delete_all(pool, admin.tenant_id, user_id)
