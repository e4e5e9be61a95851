"""A platform of the tests' own: a FastAPI app playing the LMS in LTI 1.3 (LTI Advantage)
with its own RSA keys, served on 127.0.0.1.

It has what Lectern talks to: an OIDC authorization endpoint (answering a login with an
auto-posting form holding the signed ``id_token``, as an LMS does), its JWKS, an OAuth 2
token endpoint (client credentials, checking the tool's signed assertion against the tool's
own JWKS), course memberships (NRPS, paged by ``Link: rel="next"``), line items and scores
(AGS), a deep-linking return URL (checking the tool's signed response and making line items),
and an openid-configuration with a registration endpoint (Dynamic Registration).

A test prepares a launch (``prepare``: who, which course, which message) and gets the
``lti_message_hint`` to start it with; ``tamper`` lets a hostile test change the claims, the
header or the key before the token is signed."""

from __future__ import annotations

import asyncio
import re
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html import escape, unescape
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jwt.algorithms import RSAAlgorithm

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
MEMBERSHIP_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LINEITEM_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"


@dataclass
class Key:
    """An RSA key of the platform."""

    kid: str
    private: Any

    @classmethod
    def new(cls, kid: str | None = None) -> Key:
        return cls(
            kid or secrets.token_hex(6),
            rsa.generate_private_key(public_exponent=65537, key_size=2048),
        )

    def jwk(self) -> dict[str, Any]:
        public: dict[str, Any] = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**public, "kid": self.kid, "alg": "RS256", "use": "sig"}


@dataclass
class Prepared:
    """A launch the platform will answer: the message's claims and how to sign them."""

    sub: str
    claims: dict[str, Any]
    tamper: Callable[[dict[str, Any], dict[str, Any]], Key | None] | None = None


@dataclass
class Platform:
    """The platform's state; ``url`` once served."""

    url: str = ""
    client_id: str = "lectern-client"
    deployment_id: str = "dep-1"
    tool_jwks_url: str = ""
    tool_launch_url: str = ""
    key: Key = field(default_factory=Key.new)
    #: keys still published beside the signing key (a rotation in progress)
    retired: list[Key] = field(default_factory=list)
    registration_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    prepared: dict[str, Prepared] = field(default_factory=dict)
    #: course id -> members (NRPS member objects)
    courses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    page_size: int = 100
    #: line item URL -> the line item; scores received per line item URL
    lineitems: dict[str, dict[str, Any]] = field(default_factory=dict)
    scores: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the deep-linking responses received (verified claims)
    deep_links: list[dict[str, Any]] = field(default_factory=list)
    #: dynamic registrations received (the tool's configuration)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    tokens: dict[str, set[str]] = field(default_factory=dict)
    token_requests: int = 0
    #: the scopes each token request asked for
    token_scopes: list[str] = field(default_factory=list)
    score_posts: int = 0
    jwks_fetches: int = 0
    #: while true, the score and token endpoints answer 503 (the platform is down)
    down: bool = False
    #: while true, the auth page waits to be posted (a test clears the browser's cookies
    #: first) and sends the launch with ``lti_storage_target=_parent``
    hold_launch: bool = False

    @property
    def issuer(self) -> str:
        return self.url

    # --- what tests prepare --------------------------------------------------------------

    def course(self, course_id: str, members: list[dict[str, Any]]) -> str:
        """Set a course's roster; its memberships URL."""
        self.courses[course_id] = members
        return f"{self.url}/courses/{course_id}/memberships"

    def lineitem(self, course_id: str, label: str = "Quiz", maximum: float = 10) -> str:
        """A line item of a course; its URL."""
        url = f"{self.url}/courses/{course_id}/lineitems/{uuid.uuid4().hex[:8]}"
        self.lineitems[url] = {"id": url, "label": label, "scoreMaximum": maximum}
        return url

    def prepare(
        self,
        *,
        sub: str,
        course_id: str | None = "course-1",
        role: str = LEARNER,
        message_type: str = "LtiResourceLinkRequest",
        resource_link_id: str = "link-1",
        custom: dict[str, str] | None = None,
        lineitem: str | None = None,
        name: str | None = "Sam Student",
        email: str | None = None,
        tamper: Callable[[dict[str, Any], dict[str, Any]], Key | None] | None = None,
        deployment_id: str | None = None,
    ) -> str:
        """A launch for ``sub``; the ``lti_message_hint`` that starts it."""
        claims: dict[str, Any] = {
            LTI + "message_type": message_type,
            LTI + "version": "1.3.0",
            LTI + "deployment_id": deployment_id or self.deployment_id,
            LTI + "target_link_uri": self.tool_launch_url,
            LTI + "roles": [role],
        }
        if name:
            claims["name"] = name
        if email:
            claims["email"] = email
        if course_id is not None:
            claims[LTI + "context"] = {
                "id": course_id,
                "title": f"Course {course_id}",
                "label": course_id.upper(),
            }
            claims[NRPS_CLAIM] = {
                "context_memberships_url": f"{self.url}/courses/{course_id}/memberships",
                "service_versions": ["2.0"],
            }
            claims[AGS_CLAIM] = {
                "scope": [SCORE_SCOPE, LINEITEM_SCOPE],
                "lineitems": f"{self.url}/courses/{course_id}/lineitems",
                **({"lineitem": lineitem} if lineitem else {}),
            }
        if message_type == "LtiResourceLinkRequest":
            claims[LTI + "resource_link"] = {"id": resource_link_id, "title": "Lectern"}
        else:
            claims[DL + "deep_linking_settings"] = {
                "deep_link_return_url": f"{self.url}/deep-link-return",
                "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["iframe", "window"],
                "accept_multiple": False,
                "data": "platform-data-1",
            }
        if custom:
            claims[LTI + "custom"] = custom
        hint = secrets.token_urlsafe(8)
        self.prepared[hint] = Prepared(sub=sub, claims=claims, tamper=tamper)
        return hint

    def id_token(self, hint: str, *, nonce: str) -> str:
        """The signed id_token of a prepared launch."""
        prepared = self.prepared[hint]
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.client_id,
            "sub": prepared.sub,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            **prepared.claims,
        }
        header: dict[str, Any] = {"kid": self.key.kid}
        key = self.key
        if prepared.tamper is not None:
            key = prepared.tamper(claims, header) or key
        return jwt.encode(claims, key.private, algorithm="RS256", headers=header)

    # --- checks of what the tool sends ---------------------------------------------------

    async def tool_keys(self) -> jwt.PyJWKSet:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(self.tool_jwks_url)
        response.raise_for_status()
        return jwt.PyJWKSet.from_dict(response.json())

    async def verify_tool_jwt(self, token: str, *, audience: str) -> dict[str, Any]:
        """A JWT the tool signed, verified with the tool's published keys."""
        kid = jwt.get_unverified_header(token)["kid"]
        keyset = await self.tool_keys()
        key = next(k for k in keyset.keys if k.key_id == kid)
        verified: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=audience,
            options={"require": ["iss", "aud", "exp", "iat"]},
        )
        return verified

    def bearer(self, request: Request, scope: str) -> JSONResponse | None:
        """401 unless the request has a token of ours for ``scope``."""
        header = request.headers.get("authorization", "")
        scopes = self.tokens.get(header.removeprefix("Bearer "), set())
        if scope not in scopes:
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        return None


def build_app(platform: Platform) -> FastAPI:
    """The platform's HTTP endpoints."""
    app = FastAPI()
    _registration(app, platform)
    _launches(app, platform)
    _services(app, platform)
    return app


def _registration(app: FastAPI, platform: Platform) -> None:
    @app.get("/.well-known/openid-configuration")
    async def openid_configuration() -> dict[str, Any]:
        return {
            "issuer": platform.issuer,
            "authorization_endpoint": f"{platform.url}/auth",
            "token_endpoint": f"{platform.url}/token",
            "jwks_uri": f"{platform.url}/jwks",
            "registration_endpoint": f"{platform.url}/register",
            "scopes_supported": ["openid", SCORE_SCOPE, MEMBERSHIP_SCOPE, LINEITEM_SCOPE],
            "response_types_supported": ["id_token"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            "https://purl.imsglobal.org/spec/lti-platform-configuration": {
                "product_family_code": "test-lms",
                "version": "1.0",
                "messages_supported": [
                    {"type": "LtiResourceLinkRequest"},
                    {"type": "LtiDeepLinkingRequest"},
                ],
            },
        }

    @app.post("/register")
    async def register(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {platform.registration_token}":
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        body = await request.json()
        platform.registrations.append(body)
        platform.tool_jwks_url = body["jwks_uri"]
        platform.tool_launch_url = body["redirect_uris"][0]
        return JSONResponse(
            {
                **body,
                "client_id": platform.client_id,
                "https://purl.imsglobal.org/spec/lti-tool-configuration": {
                    **body["https://purl.imsglobal.org/spec/lti-tool-configuration"],
                    "deployment_id": platform.deployment_id,
                },
            }
        )


def _launches(app: FastAPI, platform: Platform) -> None:
    @app.get("/course-page")
    async def course_page(src: str) -> HTMLResponse:
        """A course page framing the tool, with the LTI client-side postMessage storage."""
        return HTMLResponse(
            f'<!doctype html><iframe name="tool" src="{escape(src, quote=True)}"></iframe>'
            "<script>const store = {};"
            "window.addEventListener('message', (event) => {"
            "  const m = event.data; if (!m || !m.subject) return;"
            "  if (m.subject === 'lti.put_data') store[m.key] = m.value;"
            "  if (m.subject !== 'lti.put_data' && m.subject !== 'lti.get_data') return;"
            "  event.source.postMessage({subject: m.subject + '.response',"
            "    message_id: m.message_id, key: m.key, value: store[m.key]}, event.origin);"
            "});</script>"
        )

    @app.get("/jwks")
    async def jwks() -> dict[str, Any]:
        platform.jwks_fetches += 1
        return {"keys": [platform.key.jwk(), *(k.jwk() for k in platform.retired)]}

    @app.get("/auth")
    async def auth(request: Request) -> Response:
        q = request.query_params
        ok = (
            q.get("client_id") == platform.client_id
            and q.get("response_type") == "id_token"
            and q.get("response_mode") == "form_post"
            and q.get("scope") == "openid"
            and q.get("redirect_uri") == platform.tool_launch_url
            and q.get("lti_message_hint") in platform.prepared
            and q.get("nonce")
        )
        if not ok:
            return JSONResponse({"error": "invalid_request", "query": dict(q)}, status_code=400)
        token = platform.id_token(q["lti_message_hint"], nonce=q["nonce"])
        return HTMLResponse(
            f'<form method="post" action="{q["redirect_uri"]}">'
            f'<input type="hidden" name="id_token" value="{token}">'
            f'<input type="hidden" name="state" value="{q["state"]}">'
            + (
                '<input type="hidden" name="lti_storage_target" value="_parent"></form>'
                if platform.hold_launch
                # a browser posts it at once, as an LMS's page does
                else "</form><script>document.forms[0].submit()</script>"
            )
        )

    @app.post("/deep-link-return")
    async def deep_link_return(jwt_: str = Form(alias="JWT")) -> JSONResponse:
        claims = await platform.verify_tool_jwt(jwt_, audience=platform.issuer)
        platform.deep_links.append(claims)
        made = []
        for item in claims.get(DL + "content_items", []):
            if "lineItem" in item:
                line = item["lineItem"]
                url = platform.lineitem("course-1", line["label"], line["scoreMaximum"])
                made.append({"custom": item.get("custom", {}), "lineitem": url})
        return JSONResponse({"placed": len(claims.get(DL + "content_items", [])), "made": made})


def _services(app: FastAPI, platform: Platform) -> None:
    @app.post("/token")
    async def token(request: Request) -> JSONResponse:
        platform.token_requests += 1
        if platform.down:
            return JSONResponse({"error": "down"}, status_code=503)
        form = await request.form()
        platform.token_scopes.append(str(form.get("scope", "")))
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_assertion_type")
            != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        ):
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        try:
            claims = await platform.verify_tool_jwt(
                str(form.get("client_assertion")), audience=f"{platform.url}/token"
            )
        except (jwt.PyJWTError, StopIteration) as exc:
            return JSONResponse({"error": "invalid_client", "why": str(exc)}, status_code=401)
        if claims["iss"] != platform.client_id or claims["sub"] != platform.client_id:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        access = secrets.token_urlsafe(16)
        platform.tokens[access] = set(str(form.get("scope", "")).split())
        return JSONResponse(
            {
                "access_token": access,
                "token_type": "bearer",
                "expires_in": 3600,
                "scope": form.get("scope"),
            }
        )

    @app.get("/courses/{course_id}/memberships")
    async def memberships(request: Request, course_id: str, offset: int = 0) -> Response:
        refused = platform.bearer(request, MEMBERSHIP_SCOPE)
        if refused is not None:
            return refused
        if request.headers.get("accept") != (
            "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
        ):
            return JSONResponse({"error": "not acceptable"}, status_code=406)
        members = platform.courses.get(course_id, [])
        page = members[offset : offset + platform.page_size]
        headers = {}
        if offset + platform.page_size < len(members):
            following = f"{platform.url}/courses/{course_id}/memberships?offset="
            headers["Link"] = f'<{following}{offset + platform.page_size}>; rel="next"'
        return JSONResponse(
            {"id": str(request.url), "context": {"id": course_id}, "members": page},
            headers=headers,
            media_type="application/vnd.ims.lti-nrps.v2.membershipcontainer+json",
        )

    @app.post("/courses/{course_id}/lineitems/{item}/scores")
    async def scores(request: Request, course_id: str, item: str) -> Response:
        platform.score_posts += 1
        if platform.down:
            return JSONResponse({"error": "down"}, status_code=503)
        refused = platform.bearer(request, SCORE_SCOPE)
        if refused is not None:
            return refused
        if request.headers.get("content-type") != "application/vnd.ims.lis.v1.score+json":
            return JSONResponse({"error": "wrong media type"}, status_code=415)
        url = f"{platform.url}/courses/{course_id}/lineitems/{item}"
        if url not in platform.lineitems:
            return JSONResponse({"error": "no such line item"}, status_code=404)
        platform.scores.setdefault(url, []).append(await request.json())
        return Response(status_code=204)


@asynccontextmanager
async def serve_platform(platform: Platform | None = None) -> AsyncIterator[Platform]:
    """Serve a platform on a free port of 127.0.0.1."""
    platform = platform or Platform()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(platform), host="127.0.0.1", port=0, log_config=None, access_log=False
        )
    )
    task = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    platform.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        yield platform
    finally:
        server.should_exit = True
        await task


# --- a browser, as far as a launch needs one ------------------------------------------------


_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')
_ACTION = re.compile(r'<form[^>]* action="([^"]+)"')
_DATA = re.compile(r'data-([a-z-]+)="([^"]*)"')


def form_of(html: str) -> tuple[str, dict[str, str]]:
    """The action and hidden fields of the first form of a page."""
    action = _ACTION.search(html)
    assert action is not None, html[:500]
    return unescape(action.group(1)), {k: unescape(v) for k, v in _INPUT.findall(html)}


def data_of(html: str) -> dict[str, str]:
    """The data attributes of a page (the LTI pages say what they do in them)."""
    return {k: unescape(v) for k, v in _DATA.findall(html)}


async def login(
    client: httpx.AsyncClient,
    platform: Platform,
    tool_url: str,
    hint: str,
    **extra: str,
) -> tuple[str, dict[str, str], dict[str, str]]:
    """Start a launch at the tool and let the platform answer: (launch URL, form fields the
    platform posts, cookies the tool set)."""
    query = {
        "iss": platform.issuer,
        "login_hint": "user",
        "target_link_uri": platform.tool_launch_url,
        "lti_message_hint": hint,
        "client_id": platform.client_id,
        "lti_deployment_id": platform.deployment_id,
        **extra,
    }
    started = await client.get(f"{tool_url}/lti/login?{urlencode(query)}")
    assert started.status_code == 302, started.text
    cookies = {
        c.split("=", 1)[0]: c.split("=", 1)[1].split(";", 1)[0]
        for c in started.headers.get_list("set-cookie")
    }
    answered = await client.get(started.headers["location"])
    assert answered.status_code == 200, answered.text
    action, fields = form_of(answered.text)
    return action, fields, cookies


async def launch(
    client: httpx.AsyncClient, platform: Platform, tool_url: str, hint: str
) -> httpx.Response:
    """A whole launch, as a browser makes it: login, the platform's answer, the form post."""
    action, fields, cookies = await login(client, platform, tool_url, hint)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    return await client.post(action, data=fields, headers={"Cookie": cookie})
