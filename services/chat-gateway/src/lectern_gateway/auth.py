"""Bearer-token authentication and role checks.

Tokens are JWTs carrying ``tenant``, ``sub`` (user), ``role`` (student, teacher, admin) and
``plan`` (free, pro), signed HS256 with ``LECTERN_JWT_SECRET``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Literal

import jwt
from fastapi import Depends, Request

from lectern_gateway.problems import ProblemError

Role = Literal["student", "teacher", "admin"]
Plan = Literal["free", "pro"]
ROLES: tuple[Role, ...] = ("student", "teacher", "admin")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    tenant_id: str
    user_id: str
    role: Role
    plan: Plan = "free"

    @property
    def is_staff(self) -> bool:
        """Teachers and admins."""
        return self.role in ("teacher", "admin")


def issue_token(
    *,
    secret: str,
    tenant_id: str,
    user_id: str,
    role: Role,
    plan: Plan = "free",
    ttl_s: int = 12 * 3600,
) -> str:
    """Sign an HS256 bearer token (development and tests; production uses an IdP)."""
    now = int(time.time())
    claims = {
        "tenant": tenant_id, "sub": user_id, "role": role, "plan": plan,
        "iat": now, "exp": now + ttl_s,
    }  # fmt: skip
    return jwt.encode(claims, secret, algorithm="HS256")


def decode_token(token: str, *, secret: str) -> Principal:
    """Verify a bearer token and return its principal; raises ``ProblemError`` (401)."""
    try:
        claims = jwt.decode(
            token, secret, algorithms=["HS256"], options={"require": ["exp", "sub", "tenant"]}
        )
    except jwt.PyJWTError as exc:
        raise _unauthorized(f"invalid bearer token: {exc}") from exc
    role = claims.get("role", "student")
    plan = claims.get("plan", "free")
    if role not in ROLES or plan not in ("free", "pro"):
        raise _unauthorized("token has an unknown role or plan")
    return Principal(
        tenant_id=str(claims["tenant"]), user_id=str(claims["sub"]), role=role, plan=plan
    )


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(
        401, "Unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="lectern"'}
    )


async def get_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller, from ``Authorization: Bearer ...``."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("missing bearer token")
    authenticator = request.app.state.authenticator
    principal: Principal = await authenticator(token.strip())
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_staff(principal: PrincipalDep) -> Principal:
    """FastAPI dependency: teachers and admins only."""
    if not principal.is_staff:
        raise ProblemError(403, "Forbidden", "teachers and admins only")
    return principal


StaffDep = Annotated[Principal, Depends(require_staff)]
