"""Development sign-in: bearer tokens for the demo users, only when the environment is
``development`` (any other environment answers 404, as if the route did not exist)."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from lectern_gateway.auth import Plan, Role, issue_token
from lectern_gateway.deps import SettingsDep
from lectern_gateway.problems import ProblemError


async def require_development(settings: SettingsDep) -> None:
    """404 (the same answer as an unknown path) unless the environment is development.

    A dependency, so it runs before the body is validated: nothing tells a production
    gateway's callers that the route exists.
    """
    if settings.environment != "development":
        raise ProblemError(404, "Not Found", "Not Found")


router = APIRouter(tags=["development"], dependencies=[Depends(require_development)])

#: the tenant of the demo corpus that ``lectern up`` loads, and of the demo users
DEMO_TENANT = "demo"
DEV_TOKEN_TTL_S = 12 * 3600


def demo_user(role: Role) -> str:
    """The user id of the demo user with ``role`` (``demo-student``, ``demo-teacher`` ...)."""
    return f"demo-{role}"


class DevTokenRequest(BaseModel):
    """Which demo user to sign in as."""

    role: Role = "student"
    plan: Plan = Field(default="pro", description="pro: no daily message limit while trying it")


class DevToken(BaseModel):
    """A bearer token for a demo user of the ``demo`` tenant."""

    token: str = Field(description="send as `Authorization: Bearer <token>`")
    token_type: Literal["bearer"] = "bearer"  # noqa: S105 - the scheme's name, not a secret
    tenant: str
    user_id: str
    role: Role
    plan: Plan
    expires_at: int = Field(description="Unix time")


@router.post(
    "/v1/dev/token",
    summary="Development only: a bearer token for the demo student, teacher or admin",
    description="Answers 404 unless the gateway's `LECTERN_ENVIRONMENT` is `development`. "
    "Signs an HS256 token for the user `demo-<role>` of the `demo` tenant (where "
    "`lectern up` loads the demo corpus); the web UI's demo sign-in buttons use it.",
    responses={404: {"description": "the gateway does not run in development"}},
)
async def dev_token(body: DevTokenRequest, settings: SettingsDep) -> DevToken:
    user_id = demo_user(body.role)
    token = issue_token(
        secret=settings.effective_jwt_secret,
        tenant_id=DEMO_TENANT,
        user_id=user_id,
        role=body.role,
        plan=body.plan,
        ttl_s=DEV_TOKEN_TTL_S,
    )
    return DevToken(
        token=token,
        tenant=DEMO_TENANT,
        user_id=user_id,
        role=body.role,
        plan=body.plan,
        expires_at=int(time.time()) + DEV_TOKEN_TTL_S,
    )
