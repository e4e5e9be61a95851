"""What other domains ask of a tenant's settings (no HTTP in here)."""

from __future__ import annotations

from lectern_common.db.types import Pool
from lectern_gateway.tenant import repository as repo


async def web_search_for(pool: Pool, tenant_id: str, *, default: bool) -> bool:
    """Whether the tenant's answers may search the web."""
    chosen = await repo.web_search(pool=pool, tenant_id=tenant_id)
    return default if chosen is None else chosen


async def teachers_see_students(pool: Pool, tenant_id: str) -> bool:
    """Whether the tenant lets teachers read each student of their classes."""
    return await repo.teachers_see_students(pool=pool, tenant_id=tenant_id)
