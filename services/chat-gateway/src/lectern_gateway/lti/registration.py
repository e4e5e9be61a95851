"""Platform registrations (admins) and LTI Dynamic Registration 1.0.

A registration belongs to one tenant; its deployments are keyed by (issuer, client id,
deployment id), so one Canvas Cloud issuer, or one developer key installed in many schools,
maps each school to its own tenant. Dynamic Registration: an admin makes a registration URL
(``POST /v1/lti/registration-invites``) and pastes it into the LMS's "add by URL" screen; the
LMS opens it with ``openid_configuration`` and ``registration_token``; Lectern fetches and
checks the platform's configuration, POSTs its own tool configuration to the platform's
registration endpoint and stores what comes back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import jwt

from lectern_common.db.types import Pool
from lectern_gateway.lti import claims
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.platform import PlatformClient, PlatformError
from lectern_gateway.problems import ProblemError

INVITE_PURPOSE = "lti-dynamic-registration"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Canvas Cloud's issuers: their openid-configuration is served from each school's Canvas (or
#: Instructure's SSO) host, not from the issuer's own
CANVAS_ISSUERS = (
    "canvas.instructure.com",
    "canvas.beta.instructure.com",
    "canvas.test.instructure.com",
)
CANVAS_HOSTS = (".instructure.com", ".canvaslms.com")
PLATFORM_URLS = ("authorization_endpoint", "token_endpoint", "jwks_uri", "registration_endpoint")


def bad(detail: str, reason: str = "bad_registration") -> ProblemError:
    """A registration refused (400 problem+json)."""
    return ProblemError(400, "Bad request", detail, reason=reason)


def check_url(url: str, what: str) -> str:
    """An https URL (http only on a loopback host, for local platforms and tests)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(f"{what} is not a URL: {url!r}") from exc
    secure = parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)
    if not secure or not parts.hostname:
        raise bad(f"{what} must be an https URL, not {url!r}")
    return url


async def create(
    pool: Pool, *, tenant_id: str, values: dict[str, Any], deployment_ids: Sequence[str]
) -> dict[str, Any]:
    """Store a registration with its deployments (409 when another registration holds the
    (issuer, client id) or one of the deployments)."""
    for key in ("issuer", "auth_url", "token_url", "jwks_url"):
        check_url(values[key], key)
    try:
        async with pool.acquire() as conn, conn.transaction():
            registration_id = await repo.insert_registration(
                conn, {**values, "tenant_id": tenant_id}
            )
            await repo.set_deployments(
                conn, registration_id=registration_id, deployment_ids=deployment_ids
            )
    except asyncpg.UniqueViolationError as exc:
        raise ProblemError(
            409,
            "Conflict",
            f"this tenant already registered issuer {values['issuer']!r} with "
            f"client id {values['client_id']!r}",
            reason="registration_exists",
        ) from exc
    except repo.DeploymentTaken as exc:
        raise ProblemError(
            409,
            "Conflict",
            f"deployment(s) {', '.join(exc.deployment_ids)} of this issuer and "
            "client id are registered already",
            reason="deployment_taken",
        ) from exc
    found = await repo.get_registration(pool, tenant_id=tenant_id, registration_id=registration_id)
    assert found is not None
    return found


async def update(
    pool: Pool, *, tenant_id: str, registration_id: uuid.UUID, changes: dict[str, Any]
) -> dict[str, Any]:
    """Change a registration's endpoints, name and/or deployments (404 when it is not the
    tenant's; 409 when a deployment is another's)."""
    for key in ("auth_url", "token_url", "jwks_url"):
        if changes.get(key) is not None:
            check_url(changes[key], key)
    try:
        async with pool.acquire() as conn, conn.transaction():
            if not await repo.update_registration(
                conn, tenant_id=tenant_id, registration_id=registration_id, changes=changes
            ):
                raise ProblemError(404, "Not found", f"no LTI registration {registration_id}")
            if changes.get("deployment_ids") is not None:
                await repo.set_deployments(
                    conn, registration_id=registration_id, deployment_ids=changes["deployment_ids"]
                )
    except repo.DeploymentTaken as exc:
        raise ProblemError(
            409,
            "Conflict",
            f"deployment(s) {', '.join(exc.deployment_ids)} are registered already",
            reason="deployment_taken",
        ) from exc
    found = await repo.get_registration(pool, tenant_id=tenant_id, registration_id=registration_id)
    assert found is not None
    return found


# --- Dynamic Registration -------------------------------------------------------------------


def make_invite(*, secret: str, tenant_id: str, admin: str, ttl_s: int) -> str:
    """A signed, expiring token naming the tenant a dynamic registration will belong to."""
    now = int(time.time())
    return jwt.encode(
        {
            "tenant": tenant_id,
            "sub": admin,
            "purpose": INVITE_PURPOSE,
            "iat": now,
            "exp": now + ttl_s,
        },
        secret,
        algorithm="HS256",
    )


def read_invite(invite: str, *, secret: str) -> tuple[str, str]:
    """(tenant, admin) of a live invite; 403 problem otherwise."""
    try:
        found = jwt.decode(invite, secret, algorithms=["HS256"], options={"require": ["exp"]})
    except jwt.PyJWTError as exc:
        raise ProblemError(
            403, "Forbidden", f"the registration URL is not valid: {exc}", reason="bad_invite"
        ) from exc
    if found.get("purpose") != INVITE_PURPOSE or not isinstance(found.get("tenant"), str):
        raise ProblemError(403, "Forbidden", "not a registration URL", reason="bad_invite")
    return found["tenant"], str(found.get("sub", ""))


def tool_configuration(base_url: str, *, name: str = "Lectern") -> dict[str, Any]:
    """Lectern's client metadata with its LTI tool configuration (Dynamic Registration's body;
    also what docs/lti.md shows)."""
    launch = f"{base_url}/lti/launch"
    return {
        "application_type": "web",
        "response_types": ["id_token"],
        "grant_types": ["implicit", "client_credentials"],
        "initiate_login_uri": f"{base_url}/lti/login",
        "redirect_uris": [launch],
        "client_name": name,
        "jwks_uri": f"{base_url}/lti/jwks",
        "token_endpoint_auth_method": "private_key_jwt",
        "scope": " ".join(claims.TOOL_SCOPES),
        claims.TOOL_CONFIGURATION: {
            "domain": urlsplit(base_url).netloc,
            "target_link_uri": launch,
            "description": "A tutor that answers from the course's own material, with quizzes "
            "whose scores go to the gradebook.",
            "claims": ["iss", "sub", "name", "given_name", "family_name", "email"],
            "messages": [
                {
                    "type": claims.DEEP_LINKING_REQUEST,
                    "target_link_uri": launch,
                    "label": f"{name}: add a module, document or quiz",
                },
                {"type": claims.RESOURCE_LINK_REQUEST, "target_link_uri": launch},
            ],
        },
    }


def check_platform_configuration(config: Any, config_url: str) -> dict[str, Any]:
    """The platform's openid-configuration, checked: an issuer matching the URL it came from,
    the endpoints LTI needs (https), RS256 and the LTI platform configuration."""
    if not isinstance(config, dict):
        raise bad("the openid-configuration is not a JSON object")
    issuer = config.get("issuer")
    if not isinstance(issuer, str):
        raise bad("the openid-configuration has no issuer")
    check_url(issuer, "issuer")
    issuer_host, config_host = urlsplit(issuer).hostname or "", urlsplit(config_url).hostname or ""
    canvas = issuer_host in CANVAS_ISSUERS and config_host.endswith(CANVAS_HOSTS)
    if issuer_host != config_host and not canvas:
        raise bad(
            f"the configuration at {config_host} names issuer {issuer!r} of another host",
            "issuer_mismatch",
        )
    for key in PLATFORM_URLS:
        if not isinstance(config.get(key), str):
            raise bad(f"the openid-configuration has no {key}")
        check_url(config[key], key)
    algorithms = config.get("id_token_signing_alg_values_supported", ["RS256"])
    if not isinstance(algorithms, list) or "RS256" not in algorithms:
        raise bad("the platform does not sign id_tokens with RS256")
    if not isinstance(config.get(claims.PLATFORM_CONFIGURATION), dict):
        raise bad(f"the openid-configuration lacks {claims.PLATFORM_CONFIGURATION}")
    return config


async def register_dynamically(
    *,
    pool: Pool,
    platforms: PlatformClient,
    tenant_id: str,
    admin: str,
    config_url: str,
    registration_token: str | None,
    base_url: str,
) -> dict[str, Any]:
    """Fetch and check the platform's configuration, register Lectern with it, store the
    result; the stored registration."""
    check_url(config_url, "openid_configuration")
    try:
        config = check_platform_configuration(await platforms.get_json(config_url), config_url)
        headers = {"Accept": "application/json"}
        if registration_token:
            headers["Authorization"] = f"Bearer {registration_token}"
        response = await platforms.send(
            "POST",
            config["registration_endpoint"],
            json=tool_configuration(base_url),
            headers=headers,
        )
    except PlatformError as exc:
        raise ProblemError(
            502, "Platform error", f"registration failed: {exc.message}", reason="platform_error"
        ) from exc
    if not 200 <= response.status_code < 300:
        raise ProblemError(
            502,
            "Platform error",
            f"the platform refused the registration: "
            f"HTTP {response.status_code} {response.text[:300]}",
            reason="registration_refused",
        )
    try:
        answer = response.json()
    except ValueError as exc:
        raise ProblemError(
            502, "Platform error", "the registration answer is not JSON", reason="platform_error"
        ) from exc
    client_id = answer.get("client_id") if isinstance(answer, dict) else None
    if not isinstance(client_id, str) or not client_id:
        raise ProblemError(
            502,
            "Platform error",
            "the registration answer has no client_id",
            reason="platform_error",
        )
    tool = answer.get(claims.TOOL_CONFIGURATION)
    deployment = tool.get("deployment_id") if isinstance(tool, dict) else None
    values = {
        "issuer": config["issuer"],
        "client_id": client_id,
        "name": str(config.get(claims.PLATFORM_CONFIGURATION, {}).get("product_family_code", ""))
        or None,
        "auth_url": config["authorization_endpoint"],
        "token_url": config["token_endpoint"],
        "jwks_url": config["jwks_uri"],
        "source": "dynamic",
        "platform_config": config,
        "created_by": admin,
    }
    deployments = [deployment] if isinstance(deployment, str) and deployment else []
    return await create(pool, tenant_id=tenant_id, values=values, deployment_ids=deployments)
