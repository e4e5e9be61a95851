"""A tenant's own settings (admins): whether answers may search the web, how long sessions
are kept, and whether teachers see each student of their classes or only the aggregates.

Web search is Gemini's Google Search grounding: the web pages found are cited as [W#], apart
from the course material [T#]. Unset, a tenant follows the deployment's default
(``LECTERN_GATEWAY_WEB_SEARCH``). Session retention: sessions idle for more than that many
days are deleted with everything that belongs to them (``privacy.retention``); unset, kept.
Teachers see what a class finds hard as aggregates; with ``teachers_see_students`` they may
also read each rostered student's struggles and mastered topics (``classes.routes``).
A ``PUT`` changes the fields it names and leaves the others as they are.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from lectern_common.db.types import Pool
from lectern_gateway.auth import AdminDep, StaffDep
from lectern_gateway.deps import PoolDep, SettingsDep
from lectern_gateway.tenant import repository as repo

router = APIRouter(tags=["tenant"])


class TenantSettingsIn(BaseModel):
    """What an admin sets; a field left out is unchanged, ``null`` goes back to the default."""

    web_search: bool | None = Field(
        default=None, description="answers may search the web and cite it as [W#]"
    )
    session_retention_days: int | None = Field(
        default=None,
        ge=1,
        le=36500,
        description="sessions idle for more than this many days are deleted with their "
        "messages, tutor checks, flags, knowledge gaps and turn signals (null: kept)",
    )
    teachers_see_students: bool | None = Field(
        default=None,
        description="teachers may read each rostered student's struggles and mastered topics, "
        "not only the class's aggregates (null: aggregates only, the default)",
    )


class TenantSettings(BaseModel):
    """The tenant's settings as they apply now."""

    web_search: bool = Field(description="in effect: the tenant's choice or the default")
    web_search_set: bool | None = Field(description="the tenant's own choice (null: default)")
    session_retention_days: int | None = Field(
        default=None, description="sessions idle longer are deleted (null: kept, the default)"
    )
    teachers_see_students: bool = Field(
        default=False, description="teachers see each rostered student, not only aggregates"
    )
    updated_by: str | None = None
    updated_at: datetime | None = None


async def _view(pool: Pool, tenant_id: str, default: bool) -> TenantSettings:
    row = await repo.tenant_settings(pool=pool, tenant_id=tenant_id)
    chosen = None if row is None else row["web_search"]
    return TenantSettings(
        web_search=default if chosen is None else bool(chosen),
        web_search_set=chosen,
        session_retention_days=None if row is None else row["session_retention_days"],
        teachers_see_students=row is not None and bool(row["teachers_see_students"]),
        updated_by=None if row is None else row["updated_by"],
        updated_at=None if row is None else row["updated_at"],
    )


@router.get("/v1/tenant/settings", summary="The tenant's settings (staff)")
async def get_settings(staff: StaffDep, pool: PoolDep, settings: SettingsDep) -> TenantSettings:
    return await _view(pool, staff.tenant_id, settings.web_search)


@router.put("/v1/tenant/settings", summary="Change the tenant's settings (admins)")
async def put_settings(
    body: TenantSettingsIn, admin: AdminDep, pool: PoolDep, settings: SettingsDep
) -> TenantSettings:
    await repo.save_tenant_settings(
        pool=pool, tenant_id=admin.tenant_id, updated_by=admin.user_id,
        web_search=body.web_search, session_retention_days=body.session_retention_days,
        teachers_see_students=body.teachers_see_students, given=set(body.model_fields_set),
    )  # fmt: skip
    return await _view(pool, admin.tenant_id, settings.web_search)
