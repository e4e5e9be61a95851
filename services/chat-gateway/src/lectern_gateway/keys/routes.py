"""API keys for machine clients (``X-API-Key``): create, list, revoke (admins of the tenant)."""

from __future__ import annotations

import uuid
from datetime import datetime

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from lectern_gateway.auth import (
    AdminDep,
    Plan,
    Role,
    issue_api_key,
    list_api_keys,
    revoke_api_key,
)
from lectern_gateway.deps import PoolDep
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["api keys"])


class ApiKeyCreate(BaseModel):
    """A new key: who it is for, the role it acts with and its plan (rate limits)."""

    name: str = Field(min_length=1, max_length=200, description="what uses the key")
    role: Role = Field(default="teacher", description="the role requests with the key have")
    plan: Plan = Field(default="pro", description="rate limits of its chat messages")


class ApiKey(BaseModel):
    """An API key's record (never the key itself)."""

    id: uuid.UUID
    name: str
    role: Role
    plan: Plan
    created_by: str | None
    created_at: datetime
    revoked_at: datetime | None


class CreatedApiKey(ApiKey):
    """A key just created: ``key`` is shown this once (only its SHA-256 is stored)."""

    key: str = Field(description="send as `X-API-Key`; it cannot be shown again")


@router.post(
    "/v1/api-keys", status_code=201, summary="Create an API key (admins; the key is shown once)"
)
async def create_key(body: ApiKeyCreate, admin: AdminDep, pool: PoolDep) -> CreatedApiKey:
    key, row = await issue_api_key(
        pool=pool,
        tenant_id=admin.tenant_id,
        name=body.name,
        role=body.role,
        plan=body.plan,
        created_by=admin.user_id,
    )
    return CreatedApiKey.model_validate({**row, "key": key})


@router.get("/v1/api-keys", summary="The tenant's API keys, newest first (admins; no secrets)")
async def list_keys(admin: AdminDep, pool: PoolDep) -> list[ApiKey]:
    return [
        ApiKey.model_validate(r) for r in await list_api_keys(pool=pool, tenant_id=admin.tenant_id)
    ]


@router.delete(
    "/v1/api-keys/{key_id}", status_code=204, summary="Revoke an API key (admins; at once)"
)
async def revoke_key(key_id: uuid.UUID, admin: AdminDep, pool: PoolDep) -> Response:
    row = await revoke_api_key(pool=pool, tenant_id=admin.tenant_id, key_id=key_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no API key {key_id}")
    return Response(status_code=204)
