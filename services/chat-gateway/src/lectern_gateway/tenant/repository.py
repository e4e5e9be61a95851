"""The tenant's settings' SQL (``tenant_settings``: one row per tenant, absent until set)."""

from __future__ import annotations

from typing import Any

from lectern_common.db.types import Queryable


async def tenant_settings(*, pool: Queryable, tenant_id: str) -> Any:
    """The tenant's settings row (``web_search``, ``session_retention_days``,
    ``teachers_see_students``, ``updated_by``, ``updated_at``), or None."""
    return await pool.fetchrow(
        "SELECT web_search, session_retention_days, teachers_see_students, updated_by, "
        "updated_at "
        "FROM tenant_settings WHERE tenant_id = $1",
        tenant_id,
    )


async def web_search(*, pool: Queryable, tenant_id: str) -> bool | None:
    """The tenant's web search choice (None: not set)."""
    chosen = await pool.fetchval(
        "SELECT web_search FROM tenant_settings WHERE tenant_id = $1", tenant_id
    )
    return None if chosen is None else bool(chosen)


async def teachers_see_students(*, pool: Queryable, tenant_id: str) -> bool:
    """Whether the tenant lets teachers read each student of their classes (unset: no)."""
    chosen = await pool.fetchval(
        "SELECT teachers_see_students FROM tenant_settings WHERE tenant_id = $1", tenant_id
    )
    return bool(chosen)


async def save_tenant_settings(
    *,
    pool: Queryable,
    tenant_id: str,
    updated_by: str,
    web_search: bool | None,
    session_retention_days: int | None,
    teachers_see_students: bool | None,
    given: set[str],
) -> None:
    """Set the fields named in ``given`` (the others keep their stored values)."""
    await pool.execute(
        "INSERT INTO tenant_settings (tenant_id, web_search, session_retention_days, "
        "teachers_see_students, updated_by) VALUES ($1, $2, $3, $7, $4) "
        "ON CONFLICT (tenant_id) DO UPDATE SET "
        "web_search = CASE WHEN $5 THEN EXCLUDED.web_search "
        "ELSE tenant_settings.web_search END, "
        "session_retention_days = CASE WHEN $6 THEN EXCLUDED.session_retention_days "
        "ELSE tenant_settings.session_retention_days END, "
        "teachers_see_students = CASE WHEN $8 THEN EXCLUDED.teachers_see_students "
        "ELSE tenant_settings.teachers_see_students END, "
        "updated_by = EXCLUDED.updated_by, updated_at = now()",
        tenant_id, web_search, session_retention_days, updated_by,
        "web_search" in given, "session_retention_days" in given, teachers_see_students,
        "teachers_see_students" in given,
    )  # fmt: skip
