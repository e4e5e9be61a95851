"""API keys' SQL (``api_keys``: only a key's SHA-256 is stored)."""

from __future__ import annotations

import uuid
from typing import Any

from lectern_common.db.types import Queryable

_API_KEY_COLUMNS = "id, tenant_id, name, role, plan, created_by, created_at, revoked_at"


async def insert_api_key(
    *,
    pool: Queryable,
    tenant_id: str,
    name: str,
    key_sha256: str,
    role: str,
    plan: str,
    created_by: str | None,
) -> Any:
    """Store a new key's hash; its row (never the key)."""
    return await pool.fetchrow(
        f"INSERT INTO api_keys (id, tenant_id, name, key_sha256, role, plan, created_by) "  # noqa: S608 - constants
        f"VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_API_KEY_COLUMNS}",
        uuid.uuid4(), tenant_id, name, key_sha256, role, plan, created_by,
    )  # fmt: skip


async def api_keys(*, pool: Queryable, tenant_id: str) -> list[Any]:
    """A tenant's keys' rows, newest first."""
    return await pool.fetch(
        f"SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = $1 "  # noqa: S608 - constants
        "ORDER BY created_at DESC, id",
        tenant_id,
    )


async def revoke_api_key(*, pool: Queryable, tenant_id: str, key_id: uuid.UUID) -> Any:
    """Revoke a key of the tenant (once); its row, or None."""
    return await pool.fetchrow(
        f"UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) "  # noqa: S608 - constants
        f"WHERE id = $1 AND tenant_id = $2 RETURNING {_API_KEY_COLUMNS}",
        key_id, tenant_id,
    )  # fmt: skip


async def live_api_key(*, pool: Queryable, key_sha256: str) -> Any:
    """The unrevoked key with this hash (``id``, ``tenant_id``, ``role``, ``plan``), or None."""
    return await pool.fetchrow(
        "SELECT id, tenant_id, role, plan FROM api_keys "
        "WHERE key_sha256 = $1 AND revoked_at IS NULL",
        key_sha256,
    )
