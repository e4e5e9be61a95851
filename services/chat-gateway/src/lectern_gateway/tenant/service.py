"""What other domains ask of a tenant's settings (no HTTP in here)."""

from __future__ import annotations

from lectern_common.db.types import Pool


async def web_search_for(pool: Pool, tenant_id: str, *, default: bool) -> bool:
    """Whether the tenant's answers may search the web."""
    chosen = await pool.fetchval(
        "SELECT web_search FROM tenant_settings WHERE tenant_id = $1", tenant_id
    )
    return default if chosen is None else bool(chosen)


async def teachers_see_students(pool: Pool, tenant_id: str) -> bool:
    """Whether the tenant lets teachers read each student of their classes."""
    chosen = await pool.fetchval(
        "SELECT teachers_see_students FROM tenant_settings WHERE tenant_id = $1", tenant_id
    )
    return bool(chosen)
