"""Bearer tokens with the claims the gateway reads (HS256), for the CLI and evaluations."""

from __future__ import annotations

import os
import time

from lectern_common.settings import DEV_JWT_SECRET


def signing_secret(environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The HS256 secret to use, or None when none may be (outside development, without one)."""
    secret = environ.get("LECTERN_JWT_SECRET", "")
    development = environ.get("LECTERN_ENVIRONMENT", "development").lower() == "development"
    if not development:
        return secret if secret and secret != DEV_JWT_SECRET else None
    return secret or DEV_JWT_SECRET


def make_token(
    *,
    secret: str,
    tenant: str,
    user: str,
    role: str,
    plan: str,
    ttl_s: int,
    now: int | None = None,
    classes: list[str] | None = None,
) -> str:
    """An HS256 JWT with the gateway's claims (``classes``: the user's classes)."""
    import jwt

    issued = int(time.time()) if now is None else now
    claims: dict[str, object] = {
        "tenant": tenant, "sub": user, "role": role, "plan": plan,
        "iat": issued, "exp": issued + ttl_s,
    }  # fmt: skip
    if classes:
        claims["classes"] = classes
    return jwt.encode(claims, secret, algorithm="HS256")
