"""The tool's own RSA keys: kept in Postgres (so every replica signs with the same key and
publishes the same JWKS), made on first use, rotated with the old key still published until
every token it signed has expired."""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from lectern_common.db.types import Pool
from lectern_gateway.lti import repository as repo

KEY_BITS = 2048
#: a rotated key stays published for the tokens' lifetime and this margin (clock skew, caches)
PUBLISH_MARGIN_S = 300.0

_parsed: dict[str, Any] = {}


def new_key() -> tuple[str, str, dict[str, Any]]:
    """A fresh RSA key: (kid, private PEM, public JWK)."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    kid = secrets.token_urlsafe(12)
    public: dict[str, Any] = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    public.update({"kid": kid, "alg": "RS256", "use": "sig"})
    return kid, pem, public


async def signing_key(pool: Pool) -> tuple[str, Any]:
    """(kid, private key) of the key that signs now, made when there is none yet."""
    async with pool.acquire() as conn:
        row = await repo.signing_key(conn)
        if row is None:
            async with conn.transaction():
                await repo.lock_keys(conn)
                row = await repo.signing_key(conn)  # another replica may have made it
                if row is None:
                    kid, pem, public = new_key()
                    await repo.insert_key(conn, kid=kid, private_pem=pem, public_jwk=public)
                    row = {"kid": kid, "private_pem": pem}
    kid = str(row["kid"])
    if kid not in _parsed:
        _parsed[kid] = serialization.load_pem_private_key(row["private_pem"].encode(), None)
    return kid, _parsed[kid]


async def rotate(pool: Pool, *, token_lifetime_s: float) -> dict[str, Any]:
    """Make a new signing key; the old ones stay published while their tokens may live."""
    kid, pem, public = new_key()
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_keys(conn)
        await repo.insert_key(conn, kid=kid, private_pem=pem, public_jwk=public)
        retired = await repo.retire_keys(
            conn, except_kid=kid, publish_for_s=token_lifetime_s + PUBLISH_MARGIN_S
        )
    return {"kid": kid, "retired": retired}


async def jwks(pool: Pool) -> dict[str, Any]:
    """The JSON Web Key Set platforms verify our signatures with."""
    await signing_key(pool)  # a first request makes the first key
    return {"keys": [row["public_jwk"] for row in await repo.published_keys(pool)]}


async def published(pool: Pool) -> list[dict[str, Any]]:
    """The published keys with their dates (admins' view)."""
    return await repo.published_keys(pool)


async def sign(pool: Pool, claims: dict[str, Any], *, lifetime_s: int) -> str:
    """Sign ``claims`` RS256 with the current key (``iat``, ``exp`` and ``jti`` added)."""
    kid, key = await signing_key(pool)
    now = int(time.time())
    payload = {"iat": now, "exp": now + lifetime_s, "jti": str(uuid.uuid4()), **claims}
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})
