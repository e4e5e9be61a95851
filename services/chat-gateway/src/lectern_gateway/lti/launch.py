"""OIDC third-party login and the launch's ``id_token``, checked in full before anything is
written: state (ours, live, used once, bound to this browser), the platform's RS256
signature (its JWKS), ``iss``, ``aud`` and ``azp``, ``exp``/``iat`` with a small leeway, our
nonce, a known deployment and the LTI claims."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import jwt

from lectern_common.db.types import Pool
from lectern_gateway.lti import claims
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.claims import Role
from lectern_gateway.lti.platform import PlatformClient, PlatformError
from lectern_gateway.problems import ProblemError

MAX_ID_TOKEN_BYTES = 64 * 1024
COOKIE_PREFIX = "lti1p3_"


def refused(status: int, reason: str, detail: str) -> ProblemError:
    """A launch refused, as problem+json with a machine-readable ``reason``."""
    titles = {400: "Bad launch", 401: "Launch not authenticated", 403: "Launch refused"}
    return ProblemError(status, titles.get(status, "Launch refused"), detail, reason=reason)


def sha256(text: str) -> str:
    """Hex SHA-256 (how the browser's secret is stored)."""
    return hashlib.sha256(text.encode()).hexdigest()


def cookie_name(state: str) -> str:
    """The state cookie of one login (several launches may run at once in one browser)."""
    return COOKIE_PREFIX + state


@dataclass(frozen=True)
class Login:
    """A login initiation answered: where the browser goes, and what it keeps."""

    state: str
    browser_secret: str
    redirect_url: str
    auth_url: str
    storage_target: str | None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


async def begin_login(
    *, pool: Pool, params: Mapping[str, str], launch_url: str, ttl_s: float
) -> Login:
    """Check the platform's login initiation and store a state and nonce for it."""
    issuer, hint, target = (params.get(k) or "" for k in ("iss", "login_hint", "target_link_uri"))
    if not issuer or not hint or not target:
        missing = [k for k in ("iss", "login_hint", "target_link_uri") if not params.get(k)]
        raise refused(400, "missing_parameter", f"login initiation without {', '.join(missing)}")
    if _origin(target) != _origin(launch_url):
        raise refused(400, "foreign_target", f"target_link_uri {target!r} is not this tool's")
    client_id = params.get("client_id") or None
    deployment_id = params.get("lti_deployment_id") or None
    found = await repo.login_candidates(pool, issuer=issuer, client_id=client_id)
    if not found:
        raise refused(
            400,
            "unknown_platform",
            f"no platform registered for issuer {issuer!r}"
            + (f" and client id {client_id!r}" if client_id else ""),
        )
    if len({(f["client_id"], f["auth_url"]) for f in found}) > 1:
        raise refused(
            400,
            "ambiguous_platform",
            f"several registrations share issuer {issuer!r}:"
            " the platform must send client_id in the login initiation",
        )
    client_id, auth_url = found[0]["client_id"], found[0]["auth_url"]
    state, nonce, browser_secret = (secrets.token_urlsafe(32) for _ in range(3))
    await repo.insert_state(
        pool,
        {
            "state": state,
            "nonce": nonce,
            "issuer": issuer,
            "client_id": client_id,
            "deployment_id": deployment_id,
            "browser_sha256": sha256(browser_secret),
            "auth_url": auth_url,
        },
        ttl_s=ttl_s,
    )
    query = {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": client_id,
        "redirect_uri": launch_url,
        "login_hint": hint,
        "state": state,
        "nonce": nonce,
    }
    if params.get("lti_message_hint"):
        query["lti_message_hint"] = params["lti_message_hint"]
    separator = "&" if urlsplit(auth_url).query else "?"
    return Login(
        state=state,
        browser_secret=browser_secret,
        redirect_url=f"{auth_url}{separator}{urlencode(query)}",
        auth_url=auth_url,
        storage_target=params.get("lti_storage_target") or None,
    )


async def live_state(pool: Pool, state: str) -> dict[str, Any]:
    """The stored login of ``state`` while it may still end in a launch."""
    row = await repo.get_state(pool, state) if state else None
    if row is None:
        raise refused(400, "unknown_state", "the launch's state is not one this tool issued")
    if row["used_at"] is not None:
        raise refused(400, "state_used", "this login was used already (a launch is used once)")
    if row["expired"]:
        raise refused(400, "state_expired", "the login took too long; launch again from the LMS")
    return row


def browser_holds(row: dict[str, Any], secret: str | None) -> bool:
    """Whether the browser's secret (cookie or platform storage) is this login's."""
    return bool(secret) and hmac.compare_digest(sha256(secret or ""), row["browser_sha256"])


async def claim_state(
    pool: Pool,
    *,
    state: str,
    cookie: str | None,
    storage_target: str | None,
    storage_secret: str | None,
) -> tuple[dict[str, Any], bool]:
    """The login of a launch and whether it is now used up: live, and started by this
    browser (its cookie, or the secret read back from the platform's storage). Not used (the
    second value False) when no cookie came (third-party cookies blocked) and the platform
    has a storage to read the secret back from."""
    row = await live_state(pool, state)
    if not browser_holds(row, cookie or storage_secret):
        if storage_target and not storage_secret:
            return row, False
        raise refused(
            401,
            "wrong_state",
            "this launch's state is not the one this browser started (no or another state cookie)",
        )
    if not await repo.use_state(pool, state):
        raise refused(400, "state_used", "this login was used already (a launch is used once)")
    return row, True


@dataclass(frozen=True)
class Launch:
    """A launch whose ``id_token`` passed every check."""

    registration: dict[str, Any]
    claims: dict[str, Any]
    message_type: str
    deployment_id: str
    sub: str
    role: Role


async def verify_id_token(
    *,
    pool: Pool,
    platforms: PlatformClient,
    id_token: str,
    state_row: dict[str, Any],
    leeway_s: float,
) -> Launch:
    """Check the ``id_token`` of a launch against its login (``state_row``)."""
    if not id_token or len(id_token) > MAX_ID_TOKEN_BYTES:
        raise refused(400, "missing_id_token", "the launch has no id_token (or a huge one)")
    try:
        header = jwt.get_unverified_header(id_token)
        unverified = jwt.decode(id_token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise refused(400, "malformed_id_token", f"the id_token is not a JWT: {exc}") from exc
    if header.get("alg") != "RS256":
        raise refused(401, "wrong_algorithm", f"id_token signed {header.get('alg')!r}, not RS256")
    issuer, client_id = state_row["issuer"], state_row["client_id"]
    deployment_id = unverified.get(claims.DEPLOYMENT_ID)
    if not isinstance(deployment_id, str) or not deployment_id:
        raise refused(400, "missing_claim", f"the id_token has no {claims.DEPLOYMENT_ID} claim")
    registration = await repo.deployment(
        pool, issuer=issuer, client_id=client_id, deployment_id=deployment_id
    )
    if registration is None:
        raise refused(
            403,
            "unknown_deployment",
            f"deployment {deployment_id!r} of {issuer!r} "
            f"(client id {client_id!r}) is not registered with Lectern",
        )
    key = await _platform_key(platforms, registration["jwks_url"], header.get("kid"))
    verified = _decode(id_token, key, issuer=issuer, client_id=client_id, leeway_s=leeway_s)
    if not hmac.compare_digest(str(verified.get("nonce", "")), state_row["nonce"]):
        raise refused(401, "wrong_nonce", "the id_token's nonce is not the one of this login")
    if state_row["deployment_id"] and state_row["deployment_id"] != deployment_id:
        raise refused(400, "wrong_deployment", "the id_token's deployment is not the login's")
    message_type = check_lti_claims(verified)
    return Launch(
        registration=registration,
        claims=verified,
        message_type=message_type,
        deployment_id=deployment_id,
        sub=str(verified["sub"]),
        role=claims.lectern_role(verified[claims.ROLES]),
    )


async def _platform_key(platforms: PlatformClient, jwks_url: str, kid: Any) -> Any:
    try:
        key = await platforms.signing_key(jwks_url, kid if isinstance(kid, str) else None)
    except PlatformError as exc:
        if not exc.retryable:  # the registration's JWKS URL is refused or wrong
            raise ProblemError(
                502,
                "Platform error",
                f"the platform's keys could not be fetched: {exc}",
                reason="platform_error",
            ) from exc
        raise ProblemError(
            503,
            "Service unavailable",
            f"the platform's keys could not be fetched: {exc}",
            reason="platform_unavailable",
            headers={"Retry-After": "5"},
        ) from exc
    if key is None:
        raise refused(401, "unknown_kid", f"the platform publishes no key {kid!r} ({jwks_url})")
    return key


def _decode(token: str, key: Any, *, issuer: str, client_id: str, leeway_s: float) -> Any:
    try:
        verified = jwt.decode(
            token,
            key,
            algorithms=["RS256"],
            audience=client_id,
            issuer=issuer,
            leeway=leeway_s,
            options={"require": ["exp", "iat", "iss", "aud", "sub", "nonce"]},
        )
    except jwt.InvalidSignatureError as exc:
        raise refused(401, "bad_signature", "the id_token's signature does not verify") from exc
    except jwt.ExpiredSignatureError as exc:
        raise refused(401, "expired", "the id_token has expired") from exc
    except jwt.ImmatureSignatureError as exc:
        raise refused(401, "not_yet_valid", "the id_token was issued in the future") from exc
    except jwt.InvalidAudienceError as exc:
        raise refused(
            401, "wrong_audience", f"the id_token is not for client {client_id!r}"
        ) from exc
    except jwt.InvalidIssuerError as exc:
        raise refused(401, "wrong_issuer", f"the id_token is not from {issuer!r}") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise refused(400, "missing_claim", f"the id_token lacks {exc.claim!r}") from exc
    except jwt.PyJWTError as exc:
        raise refused(401, "invalid_id_token", f"the id_token does not verify: {exc}") from exc
    audiences = verified["aud"] if isinstance(verified["aud"], list) else [verified["aud"]]
    azp = verified.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != client_id:
        raise refused(401, "wrong_azp", f"the id_token's azp {azp!r} is not {client_id!r}")
    return verified


def check_lti_claims(token: dict[str, Any]) -> str:
    """The message type, once the LTI claims a launch needs are there and well formed."""
    message_type = token.get(claims.MESSAGE_TYPE)
    if message_type not in claims.MESSAGE_TYPES:
        raise refused(
            400,
            "unsupported_message",
            f"message_type {message_type!r} is not one of {', '.join(claims.MESSAGE_TYPES)}",
        )
    if token.get(claims.VERSION) != claims.LTI_VERSION:
        raise refused(400, "wrong_version", f"LTI version {token.get(claims.VERSION)!r}, not 1.3.0")
    roles = token.get(claims.ROLES)
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise refused(400, "missing_claim", f"{claims.ROLES} must be a list of role URIs")
    if not isinstance(token.get("sub"), str) or not 0 < len(token["sub"]) <= 255:
        raise refused(400, "missing_claim", "the id_token's sub must be 1-255 characters")
    required: list[tuple[str, str | None]] = [(claims.TARGET_LINK_URI, None)]
    if message_type == claims.RESOURCE_LINK_REQUEST:
        required.append((claims.RESOURCE_LINK, "id"))
    else:
        required.append((claims.DEEP_LINKING_SETTINGS, "deep_link_return_url"))
    for claim, field in required:
        value = token.get(claim)
        ok = (
            isinstance(value, str) and bool(value)
            if field is None
            else (isinstance(value, dict) and isinstance(value.get(field), str) and value[field])
        )
        if not ok:
            raise refused(
                400,
                "missing_claim",
                f"the id_token lacks {claim}" + (f" (with {field})" if field else ""),
            )
    context = token.get(claims.CONTEXT)
    if context is not None and not (
        isinstance(context, dict) and isinstance(context.get("id"), str) and context["id"]
    ):
        raise refused(400, "missing_claim", f"{claims.CONTEXT} must have an id")
    return str(message_type)
