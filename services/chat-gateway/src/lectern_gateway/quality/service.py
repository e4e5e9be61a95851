"""What other domains ask of the quality reports (no HTTP in here)."""

from __future__ import annotations

from lectern_common.db.types import Pool
from lectern_gateway.auth import Principal


async def teacher_classes(pool: Pool, principal: Principal) -> list[str] | None:
    """None for admins (the tenant); a teacher's classes otherwise."""
    if principal.role == "admin":
        return None
    rows = await pool.fetch(
        "SELECT DISTINCT class_id FROM documents WHERE tenant_id = $1 AND uploaded_by = $2 "
        "AND class_id IS NOT NULL",
        principal.tenant_id,
        principal.user_id,
    )
    return sorted({*principal.classes, *(r["class_id"] for r in rows)})
