"""Bearer-token authentication and role checks.

Tokens are JWTs carrying ``tenant``, ``sub`` (user), ``role`` (student, teacher, admin) and
``plan`` (free, pro), signed HS256 with ``LECTERN_JWT_SECRET`` or RS256 by an identity provider
whose keys are published at ``LECTERN_GATEWAY_JWKS_URL``. Machine clients send an API key in
``X-API-Key``; only its SHA-256 is stored (table ``api_keys``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jwt
from fastapi import Depends, Request

from lectern_common.db.types import Pool
from lectern_gateway.keys import repository as keys_repo
from lectern_gateway.problems import ProblemError

MAX_TOKEN_BYTES = 8192
MAX_TOKEN_LIFETIME_S = 30 * 24 * 3600
#: tenant and user ids: 1-128 characters, no white space or control characters
_IDENTIFIER = re.compile(r"[^\s\x00-\x1f\x7f]{1,128}")

Role = Literal["student", "teacher", "admin"]
Plan = Literal["free", "pro"]
ROLES: tuple[Role, ...] = ("student", "teacher", "admin")
MAX_CLASSES = 100


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    tenant_id: str
    user_id: str
    role: Role
    plan: Plan = "free"
    #: the classes the identity provider says the user belongs to (the ``classes`` claim)
    classes: tuple[str, ...] = ()

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
    classes: Sequence[str] = (),
) -> str:
    """Sign an HS256 bearer token (development and tests; production uses an IdP)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "tenant": tenant_id,
        "sub": user_id,
        "role": role,
        "plan": plan,
        "iat": now,
        "exp": now + ttl_s,
    }
    if classes:
        claims["classes"] = list(classes)
    return jwt.encode(claims, secret, algorithm="HS256")


def decode_token(
    token: str,
    *,
    secret: str,
    audience: str | None = None,
    issuer: str | None = None,
    max_lifetime_s: int = MAX_TOKEN_LIFETIME_S,
) -> Principal:
    """Verify an HS256 bearer token and return its principal; raises ``ProblemError`` (401).

    Holders of the shared secret may leave out ``iss`` and ``aud``; a token that states them
    must state the configured ones."""
    try:
        unverified = jwt.decode(token, options={"verify_signature": False})
        claims = jwt.decode(
            token,
            secret,
            algorithms=["HS256"],
            audience=audience,
            issuer=issuer if "iss" in unverified else None,
            options={
                "require": ["exp", "sub", "tenant"],
                "verify_aud": "aud" in unverified and audience is not None,
            },
        )
    except jwt.PyJWTError as exc:
        raise _unauthorized(f"invalid bearer token: {exc}") from exc
    return principal_from_claims(claims, max_lifetime_s=max_lifetime_s)


def principal_from_claims(
    claims: dict[str, Any], *, max_lifetime_s: int = MAX_TOKEN_LIFETIME_S
) -> Principal:
    """The principal a verified token's claims describe; raises ``ProblemError`` (401)."""
    role = claims.get("role", "student")
    plan = claims.get("plan", "free")
    if role not in ROLES or plan not in ("free", "pro"):
        raise _unauthorized("token has an unknown role or plan")
    tenant, user = claims.get("tenant"), claims.get("sub")
    for name, value in (("tenant", tenant), ("sub", user)):
        if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
            raise _unauthorized(
                f"token claim {name!r} must be a string of 1-128 characters without spaces"
            )
    expires = claims.get("exp")
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        raise _unauthorized("token claim 'exp' must be a number")
    issued = claims.get("iat")
    start = issued if isinstance(issued, int | float) and not isinstance(issued, bool) else None
    if expires - (start if start is not None else time.time()) > max_lifetime_s:
        raise _unauthorized(f"token lives longer than the maximum of {max_lifetime_s} s")
    classes = claims.get("classes", [])
    if (
        not isinstance(classes, list)
        or len(classes) > MAX_CLASSES
        or not all(isinstance(c, str) and _IDENTIFIER.fullmatch(c) for c in classes)
    ):
        raise _unauthorized(
            f"token claim 'classes' must be a list of at most {MAX_CLASSES} class ids"
        )
    return Principal(
        tenant_id=str(tenant), user_id=str(user), role=role, plan=plan, classes=tuple(classes)
    )


class TokenVerifier:
    """Verifies HS256 tokens with the shared secret and RS256 tokens with a JWKS."""

    def __init__(
        self,
        *,
        secret: str,
        jwks_url: str | None = None,
        audience: str | None = None,
        issuer: str | None = None,
        jwks_cache_s: int = 300,
    ) -> None:
        self._secret = secret
        self._audience = audience
        self._issuer = issuer
        self._jwks = (
            jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=jwks_cache_s, timeout=5)
            if jwks_url
            else None
        )

    async def __call__(self, token: str) -> Principal:
        """Verify ``token`` and return its principal; raises ``ProblemError`` (401)."""
        if len(token) > MAX_TOKEN_BYTES:
            raise _unauthorized(f"bearer token longer than {MAX_TOKEN_BYTES} bytes")
        try:
            algorithm = jwt.get_unverified_header(token).get("alg")
        except jwt.PyJWTError as exc:
            raise _unauthorized(f"invalid bearer token: {exc}") from exc
        if algorithm == "HS256":
            return decode_token(
                token, secret=self._secret, audience=self._audience, issuer=self._issuer
            )
        if algorithm != "RS256" or self._jwks is None:
            raise _unauthorized(f"unsupported token algorithm {algorithm!r}")
        jwks = self._jwks
        options: jwt.types.Options = {"require": ["exp", "sub", "tenant"]}
        try:
            # PyJWKClient fetches over blocking urllib (cached afterwards): keep it off the loop
            key = await asyncio.to_thread(jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                audience=self._audience,
                issuer=self._issuer,
                options=options,
            )
        except jwt.PyJWKClientError as exc:
            raise _unauthorized(f"no signing key for this token: {exc}") from exc
        except jwt.PyJWTError as exc:
            raise _unauthorized(f"invalid bearer token: {exc}") from exc
        return principal_from_claims(claims)


def hash_api_key(key: str) -> str:
    """The stored form of an API key (hex SHA-256)."""
    return hashlib.sha256(key.encode()).hexdigest()


async def issue_api_key(
    *,
    pool: Pool,
    tenant_id: str,
    name: str,
    role: Role = "teacher",
    plan: Plan = "pro",
    created_by: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Create an API key; returns the key (shown once: only its hash is stored) and its row."""
    key = "lk_" + secrets.token_urlsafe(32)
    row = await keys_repo.insert_api_key(
        pool=pool, tenant_id=tenant_id, name=name, key_sha256=hash_api_key(key), role=role,
        plan=plan, created_by=created_by,
    )  # fmt: skip
    return key, dict(row)


async def create_api_key(
    *, pool: Pool, tenant_id: str, name: str, role: Role = "teacher", plan: Plan = "pro"
) -> str:
    """Create an API key for a machine client and return it (only its hash is stored)."""
    key, _ = await issue_api_key(pool=pool, tenant_id=tenant_id, name=name, role=role, plan=plan)
    return key


async def list_api_keys(*, pool: Pool, tenant_id: str) -> list[dict[str, Any]]:
    """A tenant's API keys (never the keys themselves), newest first."""
    rows = await keys_repo.api_keys(pool=pool, tenant_id=tenant_id)
    return [dict(r) for r in rows]


async def revoke_api_key(*, pool: Pool, tenant_id: str, key_id: uuid.UUID) -> dict[str, Any] | None:
    """Revoke a key of the tenant (it stops working at once); None when there is none."""
    row = await keys_repo.revoke_api_key(pool=pool, tenant_id=tenant_id, key_id=key_id)
    return dict(row) if row else None


async def authenticate_api_key(*, pool: Pool, key: str) -> Principal:
    """The principal of a live API key; raises ``ProblemError`` (401).

    Looked up on every request, so a revoked key stops working at once.
    """
    row = await keys_repo.live_api_key(pool=pool, key_sha256=hash_api_key(key))
    if row is None or row["role"] not in ROLES or row["plan"] not in ("free", "pro"):
        raise _unauthorized("unknown or revoked API key")
    return Principal(
        tenant_id=row["tenant_id"],
        user_id=f"apikey:{row['id']}",
        role=row["role"],
        plan=row["plan"],
    )


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(
        401, "Unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="lectern"'}
    )


async def get_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller, from ``Authorization: Bearer ...`` or ``X-API-Key``."""
    api_key = request.headers.get("x-api-key")
    if api_key:
        return await authenticate_api_key(pool=request.app.state.lectern.pool, key=api_key)
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


async def require_admin(principal: PrincipalDep) -> Principal:
    """FastAPI dependency: admins only."""
    if principal.role != "admin":
        raise ProblemError(403, "Forbidden", "admins only")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]
