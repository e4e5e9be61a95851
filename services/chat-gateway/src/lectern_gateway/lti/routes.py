"""LTI 1.3 over HTTP: the platform-facing endpoints (``/lti/...``: login, launch, JWKS, deep
links, dynamic registration, the tool configuration) and the admin API (``/v1/lti/...``:
registrations, registration URLs, keys, roster syncs, scores)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, Field

from lectern_gateway.auth import AdminDep, StaffDep
from lectern_gateway.deps import GatewayDep, PoolDep, SettingsDep
from lectern_gateway.lti import claims, deeplink, keys, pages, registration
from lectern_gateway.lti import repository as repo
from lectern_gateway.lti.launch import begin_login, claim_state, cookie_name, verify_id_token
from lectern_gateway.lti.roster import sync_roster
from lectern_gateway.lti.service import complete_launch
from lectern_gateway.problems import ProblemError

router = APIRouter(tags=["lti"])
COOKIE_PATH = "/lti/"
INVITE_TTL_S = 7 * 86400
#: where the web UI opens for what a link targets
_VIEW = {"quiz": "quizzes", "document": "syllabus", "module": "syllabus", "home": "chat"}
Text = Annotated[str, Field(min_length=1, max_length=255)]
Url = Annotated[str, Field(min_length=8, max_length=2000)]


def problems(**codes: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses: each status (``r400=...``) with what it means, as problem+json."""
    return {
        int(code.removeprefix("r")): {
            "description": meaning,
            "content": {"application/problem+json": {"schema": {"type": "object"}}},
        }
        for code, meaning in codes.items()
    }


LAUNCH_PROBLEMS = problems(
    r400="a bad launch: an unknown, used or expired state, a malformed id_token, a missing or "
    "malformed LTI claim, a target_link_uri not this tool's (`reason` says which)",
    r401="not authenticated: no or another state cookie, an unknown kid, a bad signature, the "
    "wrong iss, aud or azp, expired, the wrong nonce",
    r403="an unknown deployment, or a deep-linking request from a student",
    r502="the platform's JWKS URL is refused",
    r503="the platform's keys could not be fetched now (Retry-After)",
)


def base_url(request: Request, public_url: str | None) -> str:
    """The gateway's public base URL (setting, else the request's)."""
    return (public_url or str(request.base_url)).rstrip("/")


# --- the platform-facing endpoints ----------------------------------------------------------


async def _login(request: Request, gateway: GatewayDep, params: dict[str, str]) -> Response:
    settings = gateway.settings
    base = base_url(request, settings.lti_public_url)
    login = await begin_login(
        pool=gateway.pool,
        params=params,
        launch_url=f"{base}/lti/launch",
        ttl_s=settings.lti_state_ttl_s,
    )
    response: Response
    if login.storage_target:
        response = pages.login_page(
            redirect_url=login.redirect_url,
            auth_url=login.auth_url,
            state=login.state,
            secret=login.browser_secret,
            storage_target=login.storage_target,
        )
    else:
        response = RedirectResponse(login.redirect_url, status_code=302)
    response.set_cookie(
        cookie_name(login.state),
        login.browser_secret,
        max_age=int(settings.lti_state_ttl_s),
        path=COOKIE_PATH,
        secure=True,
        httponly=True,
        samesite="none",
    )
    return response


LOGIN_DESCRIPTION = (
    "The platform's third-party login initiation: 302 to its authorization endpoint with a "
    "state and nonce stored in Postgres, and the state cookie (`lti1p3_<state>`, "
    "`SameSite=None; Secure; HttpOnly`). With `lti_storage_target` a page keeps the login's "
    "secret in the platform's postMessage storage first (200, HTML)."
)
LOGIN_RESPONSES = {
    200: {
        "description": "with lti_storage_target: the page that uses the platform's storage",
        "content": {"text/html": {}},
    },
    **problems(
        r400="a missing parameter, an unknown or ambiguous platform, a foreign "
        "target_link_uri (`reason` says which)"
    ),
}


@router.get(
    "/lti/login",
    summary="OIDC third-party login initiation (the LMS starts a launch)",
    response_class=RedirectResponse,
    status_code=302,
    description=LOGIN_DESCRIPTION,
    responses=LOGIN_RESPONSES,
)
async def login_get(
    request: Request,
    gateway: GatewayDep,
    iss: Annotated[str, Query(max_length=500)] = "",
    login_hint: Annotated[str, Query(max_length=2000)] = "",
    target_link_uri: Annotated[str, Query(max_length=2000)] = "",
    lti_message_hint: Annotated[str | None, Query(max_length=4000)] = None,
    client_id: Annotated[str | None, Query(max_length=255)] = None,
    lti_deployment_id: Annotated[str | None, Query(max_length=255)] = None,
    lti_storage_target: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    params = {
        "iss": iss,
        "login_hint": login_hint,
        "target_link_uri": target_link_uri,
        "lti_message_hint": lti_message_hint or "",
        "client_id": client_id or "",
        "lti_deployment_id": lti_deployment_id or "",
        "lti_storage_target": lti_storage_target or "",
    }
    return await _login(request, gateway, params)


@router.post(
    "/lti/login",
    summary="OIDC third-party login initiation, form-posted",
    response_class=RedirectResponse,
    status_code=302,
    description=LOGIN_DESCRIPTION,
    responses=LOGIN_RESPONSES,
)
async def login_post(
    request: Request,
    gateway: GatewayDep,
    iss: Annotated[str, Form(max_length=500)] = "",
    login_hint: Annotated[str, Form(max_length=2000)] = "",
    target_link_uri: Annotated[str, Form(max_length=2000)] = "",
    lti_message_hint: Annotated[str | None, Form(max_length=4000)] = None,
    client_id: Annotated[str | None, Form(max_length=255)] = None,
    lti_deployment_id: Annotated[str | None, Form(max_length=255)] = None,
    lti_storage_target: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    params = {
        "iss": iss,
        "login_hint": login_hint,
        "target_link_uri": target_link_uri,
        "lti_message_hint": lti_message_hint or "",
        "client_id": client_id or "",
        "lti_deployment_id": lti_deployment_id or "",
        "lti_storage_target": lti_storage_target or "",
    }
    return await _login(request, gateway, params)


@router.post(
    "/lti/launch",
    summary="The launch: the platform posts the id_token (form_post)",
    response_class=HTMLResponse,
    description="Checks the login state (ours, live, used once, bound to this browser by its "
    "cookie or the platform's postMessage storage), then the id_token in full. A resource "
    "link lands in the web UI signed in (the page stores the bearer token in sessionStorage); "
    "a deep-linking request shows the content picker. Any failure: problem+json, nothing made.",
    responses={
        200: {
            "description": "the landing page or the content picker",
            "content": {"text/html": {}},
        },
        **LAUNCH_PROBLEMS,
    },
)
async def launch(
    request: Request,
    gateway: GatewayDep,
    id_token: Annotated[str, Form(max_length=65536)] = "",
    state: Annotated[str, Form(max_length=200)] = "",
    lti_storage_target: Annotated[str | None, Form(max_length=200)] = None,
    lti_storage_secret: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    settings, pool = gateway.settings, gateway.pool
    base = base_url(request, settings.lti_public_url)
    row, used = await claim_state(
        pool,
        state=state,
        cookie=request.cookies.get(cookie_name(state)),
        storage_target=lti_storage_target,
        storage_secret=lti_storage_secret,
    )
    if not used and lti_storage_target:  # the secret is in the platform's storage
        return pages.recover_page(
            launch_url=f"{base}/lti/launch",
            state=state,
            id_token=id_token,
            storage_target=lti_storage_target,
            auth_url=row["auth_url"],
        )
    verified = await verify_id_token(
        pool=pool,
        platforms=gateway.lti,
        id_token=id_token,
        state_row=row,
        leeway_s=settings.lti_leeway_s,
    )
    landing = await complete_launch(
        pool=pool, platforms=gateway.lti, settings=settings, launch=verified, tool_origin=base
    )
    response: Response
    if landing.deep_link_id is not None:
        offered = await deeplink.choices(
            pool, tenant_id=landing.tenant_id, class_id=landing.class_id
        )
        dl = verified.claims[claims.DEEP_LINKING_SETTINGS]
        response = pages.picker_page(
            deep_link_id=landing.deep_link_id,
            choices=offered,
            multiple=bool(dl.get("accept_multiple")),
            platform_url=dl["deep_link_return_url"],
        )
    else:
        response = pages.landing_page(
            token=landing.token,
            class_id=landing.class_id,
            target=str(landing.target),
            view=_VIEW[landing.target.kind],
            framable=bool(settings.lti_frame_ancestors),
        )
    response.delete_cookie(cookie_name(state), path=COOKIE_PATH, secure=True, samesite="none")
    return response


@router.get("/lti/jwks", summary="The tool's public keys (JWKS)")
async def jwks(pool: PoolDep) -> JSONResponse:
    return JSONResponse(await keys.jwks(pool), headers={"Cache-Control": "max-age=300"})


@router.post(
    "/lti/deep-links/{deep_link_id}",
    response_class=HTMLResponse,
    summary="A teacher's pick: the signed LtiDeepLinkingResponse, posted back to the LMS",
    responses=problems(
        r400="the platform takes no LTI links here, nothing or too much picked, or a pick not "
        "on offer",
        r404="no such deep-linking request waits (answered, expired, never made)",
    ),
)
async def deep_link_response(
    deep_link_id: str,
    request: Request,
    gateway: GatewayDep,
    item: Annotated[list[str], Form(max_length=50)],
) -> Response:
    base = base_url(request, gateway.settings.lti_public_url)
    url, signed = await deeplink.respond(
        pool=gateway.pool,
        deep_link_id=deep_link_id,
        picked=item,
        launch_url=f"{base}/lti/launch",
        lifetime_s=gateway.settings.lti_token_lifetime_s,
    )
    return pages.post_page(url=url, jwt=signed)


@router.get(
    "/lti/register",
    response_class=HTMLResponse,
    summary="LTI Dynamic Registration: the LMS opens this registration URL",
    responses=problems(
        r400="the platform's configuration fails a check (issuer, endpoints, RS256)",
        r403="the registration URL (invite) is not valid or expired",
        r409="the registration or its deployment exists already",
        r502="the platform could not be reached, or refused the registration",
    ),
)
async def register(
    request: Request,
    gateway: GatewayDep,
    invite: Annotated[str, Query(max_length=4000)],
    openid_configuration: Annotated[str, Query(max_length=2000)],
    registration_token: Annotated[str | None, Query(max_length=8000)] = None,
) -> Response:
    settings = gateway.settings
    tenant_id, admin = registration.read_invite(invite, secret=settings.effective_jwt_secret)
    stored = await registration.register_dynamically(
        pool=gateway.pool,
        platforms=gateway.lti,
        tenant_id=tenant_id,
        admin=admin,
        config_url=openid_configuration,
        registration_token=registration_token,
        base_url=base_url(request, settings.lti_public_url),
    )
    return pages.closed_page(issuer=stored["issuer"], client_id=stored["client_id"])


@router.get("/lti/config.json", summary="The tool configuration (Dynamic Registration's body)")
async def tool_config(request: Request, settings: SettingsDep) -> dict[str, Any]:
    return registration.tool_configuration(base_url(request, settings.lti_public_url))


@router.get("/lti/canvas.json", summary="The JSON to paste into a Canvas LTI 1.3 developer key")
async def canvas_config(request: Request, settings: SettingsDep) -> dict[str, Any]:
    base = base_url(request, settings.lti_public_url)
    launch_url = f"{base}/lti/launch"
    return {
        "title": "Lectern",
        "description": "A tutor that answers from the course's material.",
        "oidc_initiation_url": f"{base}/lti/login",
        "target_link_uri": launch_url,
        "public_jwk_url": f"{base}/lti/jwks",
        "scopes": list(claims.TOOL_SCOPES),
        "extensions": [
            {
                "platform": "canvas.instructure.com",
                "privacy_level": "public",
                "settings": {
                    "placements": [
                        {
                            "placement": "course_navigation",
                            "message_type": claims.RESOURCE_LINK_REQUEST,
                            "target_link_uri": launch_url,
                            "text": "Lectern",
                        },
                        {
                            "placement": "link_selection",
                            "message_type": claims.DEEP_LINKING_REQUEST,
                            "target_link_uri": launch_url,
                            "text": "Lectern",
                        },
                        {
                            "placement": "assignment_selection",
                            "message_type": claims.DEEP_LINKING_REQUEST,
                            "target_link_uri": launch_url,
                            "text": "Lectern quiz",
                        },
                    ]
                },
            }
        ],
    }


# --- the admin API --------------------------------------------------------------------------


class RegistrationIn(BaseModel):
    """A platform as its admin screen shows it."""

    issuer: Url = Field(
        description="the platform's `iss` (Canvas Cloud: https://canvas.instructure.com)"
    )
    client_id: Text
    deployment_ids: list[Text] = Field(min_length=1, max_length=100)
    auth_url: Url = Field(description="its OIDC authorization endpoint")
    token_url: Url = Field(description="its OAuth 2 token endpoint")
    jwks_url: Url = Field(description="its public keys")
    token_audience: Url | None = Field(
        default=None, description="`aud` of our client assertions when it is not token_url"
    )
    name: str | None = Field(default=None, max_length=200)


class RegistrationPatch(BaseModel):
    """Fields to change (left out: unchanged); ``deployment_ids`` replaces the list."""

    deployment_ids: list[Text] | None = Field(default=None, min_length=1, max_length=100)
    auth_url: Url | None = None
    token_url: Url | None = None
    jwks_url: Url | None = None
    token_audience: Url | None = None
    name: str | None = Field(default=None, max_length=200)


class Registration(BaseModel):
    """A stored registration."""

    id: uuid.UUID
    issuer: str
    client_id: str
    deployment_ids: list[str]
    auth_url: str
    token_url: str
    jwks_url: str
    token_audience: str | None
    name: str | None
    source: Literal["manual", "dynamic"]
    created_by: str | None
    created_at: datetime
    updated_at: datetime


@router.post(
    "/v1/lti/registrations",
    status_code=201,
    summary="Register a platform (admins)",
    responses=problems(
        r400="a platform URL that is not https",
        r403="admins only",
        r409="this tenant has the issuer and client id, or a deployment is registered already",
    ),
)
async def create_registration(body: RegistrationIn, admin: AdminDep, pool: PoolDep) -> Registration:
    values = body.model_dump(exclude={"deployment_ids"}) | {"created_by": admin.user_id}
    found = await registration.create(
        pool, tenant_id=admin.tenant_id, values=values, deployment_ids=body.deployment_ids
    )
    return Registration.model_validate(found)


@router.get("/v1/lti/registrations", summary="The tenant's platforms (admins)")
async def list_registrations(admin: AdminDep, pool: PoolDep) -> list[Registration]:
    return [
        Registration.model_validate(r)
        for r in await repo.list_registrations(pool, tenant_id=admin.tenant_id)
    ]


@router.get("/v1/lti/registrations/{registration_id}", summary="A platform (admins)")
async def get_registration(
    registration_id: uuid.UUID, admin: AdminDep, pool: PoolDep
) -> Registration:
    found = await repo.get_registration(
        pool, tenant_id=admin.tenant_id, registration_id=registration_id
    )
    if found is None:
        raise ProblemError(404, "Not found", f"no LTI registration {registration_id}")
    return Registration.model_validate(found)


@router.patch(
    "/v1/lti/registrations/{registration_id}",
    summary="Change a platform (admins)",
    responses=problems(
        r400="a platform URL that is not https",
        r404="no such registration",
        r409="a deployment is registered already",
    ),
)
async def patch_registration(
    registration_id: uuid.UUID, body: RegistrationPatch, admin: AdminDep, pool: PoolDep
) -> Registration:
    found = await registration.update(
        pool,
        tenant_id=admin.tenant_id,
        registration_id=registration_id,
        changes=body.model_dump(exclude_unset=True),
    )
    return Registration.model_validate(found)


@router.delete(
    "/v1/lti/registrations/{registration_id}",
    status_code=204,
    summary="Remove a platform (admins; Lectern's users and classes stay)",
)
async def delete_registration(
    registration_id: uuid.UUID, admin: AdminDep, pool: PoolDep
) -> Response:
    if not await repo.delete_registration(
        pool, tenant_id=admin.tenant_id, registration_id=registration_id
    ):
        raise ProblemError(404, "Not found", f"no LTI registration {registration_id}")
    return Response(status_code=204)


class Invite(BaseModel):
    """A Dynamic Registration URL to paste into the LMS."""

    url: str
    expires_at: int = Field(description="Unix time")


@router.post(
    "/v1/lti/registration-invites",
    status_code=201,
    summary="A Dynamic Registration URL for the LMS's 'add by URL' screen (admins)",
)
async def create_invite(request: Request, admin: AdminDep, settings: SettingsDep) -> Invite:
    invite = registration.make_invite(
        secret=settings.effective_jwt_secret,
        tenant_id=admin.tenant_id,
        admin=admin.user_id,
        ttl_s=INVITE_TTL_S,
    )
    base = base_url(request, settings.lti_public_url)
    return Invite(
        url=f"{base}/lti/register?invite={invite}", expires_at=int(time.time()) + INVITE_TTL_S
    )


class ToolKey(BaseModel):
    """A published key of the tool."""

    kid: str
    created_at: datetime
    retired_at: datetime | None
    publish_until: datetime | None
    public_jwk: dict[str, Any]


class Rotated(BaseModel):
    """A rotation: the new signing key and the keys it retired (still published a while)."""

    kid: str
    retired: list[str]


@router.get("/v1/lti/keys", summary="The tool's published keys (admins)")
async def list_keys(admin: AdminDep, pool: PoolDep) -> list[ToolKey]:
    await keys.signing_key(pool)
    return [ToolKey.model_validate(k) for k in await keys.published(pool)]


@router.post("/v1/lti/keys/rotate", summary="Rotate the tool's signing key (admins)")
async def rotate_key(admin: AdminDep, pool: PoolDep, settings: SettingsDep) -> Rotated:
    return Rotated.model_validate(
        await keys.rotate(pool, token_lifetime_s=settings.lti_token_lifetime_s)
    )


class RosterSyncResult(BaseModel):
    """What a roster sync found and changed."""

    class_id: str
    members: int
    students: int
    removed: list[str] = Field(
        description="students taken off the class (nothing of theirs deleted)"
    )
    pages: int
    seconds: float


@router.post(
    "/v1/lti/classes/{class_id}/roster-sync",
    summary="Sync a class's roster from its LMS course now (staff)",
    responses=problems(
        r403="not a teacher of the class (or an admin)",
        r404="the class is no LMS course's",
        r409="the course's platform offers no membership service",
        r502="the platform's roster could not be read",
    ),
)
async def roster_sync(class_id: str, staff: StaffDep, gateway: GatewayDep) -> RosterSyncResult:
    if staff.role != "admin" and class_id not in staff.classes:
        raise ProblemError(403, "Forbidden", f"you do not teach class {class_id}")
    done = await sync_roster(
        pool=gateway.pool, platforms=gateway.lti, tenant_id=staff.tenant_id, class_id=class_id
    )
    return RosterSyncResult.model_validate(done, from_attributes=True)


class Score(BaseModel):
    """A score posted, or waiting to be, to a platform's line item."""

    id: uuid.UUID
    registration_id: uuid.UUID
    attempt_id: uuid.UUID
    lineitem_url: str
    score: dict[str, Any]
    status: Literal["pending", "sent", "failed"]
    attempts: int
    last_error: str | None
    next_attempt_at: datetime
    created_at: datetime
    sent_at: datetime | None


@router.get("/v1/lti/scores", summary="Scores for the LMS gradebooks, newest first (admins)")
async def list_scores(
    admin: AdminDep,
    pool: PoolDep,
    status: Literal["pending", "sent", "failed"] | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Score]:
    rows = await repo.list_scores(pool, tenant_id=admin.tenant_id, status=status, limit=limit)
    return [Score.model_validate(r) for r in rows]
