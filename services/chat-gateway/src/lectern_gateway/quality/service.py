"""What other domains ask of the quality reports (no HTTP in here)."""

from __future__ import annotations

from lectern_common.db.types import Pool
from lectern_gateway.auth import Principal
from lectern_gateway.quality import repository as repo


async def teacher_classes(pool: Pool, principal: Principal) -> list[str] | None:
    """None for admins (the tenant); a teacher's classes otherwise."""
    if principal.role == "admin":
        return None
    uploaded = await repo.uploaded_classes(
        pool=pool, tenant_id=principal.tenant_id, user_id=principal.user_id
    )
    return sorted({*principal.classes, *uploaded})
