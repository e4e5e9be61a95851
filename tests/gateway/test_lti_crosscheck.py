"""A cross-check with an independent LTI 1.3 implementation: the ``lti1p3platform`` package
plays the platform (its own keys, its OIDC login initiation, its signed launch messages, its
access tokens verified against Lectern's JWKS, its check of Lectern's deep-linking response),
against the real gateway on real NATS and Postgres."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI, Form, Header
from fastapi.responses import JSONResponse
from lectern_testing.chat import STUDY_MATERIAL, Gateway, offline_gateway, seed_document
from lectern_testing.lti_platform import INSTRUCTOR, LEARNER, data_of, form_of
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request, TRequest

pytestmark = pytest.mark.integration

MEMBERSHIP_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
CLIENT_ID = "crosscheck-client"


class PlatformConfig(LTI1P3PlatformConfAbstract):  # type: ignore[misc]  # lti1p3platform is untyped
    """lti1p3platform's platform, holding one registration (Lectern)."""

    registration: Registration

    def init_platform_config(self, **kwargs: Any) -> None:
        self.registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: Any) -> Registration:
        return self.registration


class Login(OIDCLoginAbstract):  # type: ignore[misc]  # lti1p3platform is untyped
    """The platform's login initiation: the URL the browser is sent to."""

    def set_lti_message_hint(self, **kwargs: Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> str:
        return url


class Preflight(Request):  # type: ignore[misc]  # lti1p3platform is untyped
    """The tool's redirect to the platform's auth endpoint, as lti1p3platform reads it."""

    def build_metadata(self, request: Any) -> TRequest:
        return {
            "method": "GET",
            "get_data": request,
            "form_data": {},
            "headers": {},
            "content_type": None,
            "path": "/auth",
            "json": None,
        }


class Launch(LTIAdvantageMessageLaunchAbstract):  # type: ignore[misc]  # lti1p3platform is untyped
    """A launch message, rendered as the data of the auto-posting form."""

    def render_launch_form(self, launch_data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return launch_data


def _pem_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def platform_app(config: PlatformConfig, members: list[dict[str, Any]]) -> FastAPI:
    """The platform's HTTP side (sync routes: lti1p3platform fetches Lectern's keys with
    blocking requests, in FastAPI's thread pool, off the gateway's event loop)."""
    app = FastAPI()

    @app.get("/jwks")
    def jwks() -> dict[str, Any]:
        return dict(config.get_jwks())

    @app.post("/token")
    def token(
        grant_type: str = Form(),
        client_assertion_type: str = Form(),
        client_assertion: str = Form(),
        scope: str = Form(),
    ) -> dict[str, Any]:
        return dict(
            config.get_access_token(
                {
                    "grant_type": grant_type,
                    "client_assertion_type": client_assertion_type,
                    "client_assertion": client_assertion,
                    "scope": scope,
                }
            )
        )

    @app.get("/memberships")
    def memberships(authorization: str = Header()) -> JSONResponse:
        if not config.validate_token(authorization.removeprefix("Bearer "), [MEMBERSHIP_SCOPE]):
            return JSONResponse({"error": "scope"}, status_code=403)
        return JSONResponse({"id": "m", "context": {"id": "course-x"}, "members": members})

    return app


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(
        nats_url,
        database_url,
        db_pool,
        url_fetch_allowed_networks=["127.0.0.0/8"],
        offline_answerer_embeddings=False,
        offline_answerer_reader=False,
    ) as running:
        yield running


@pytest.fixture
async def lms(gateway: Gateway) -> AsyncIterator[tuple[PlatformConfig, str]]:
    """lti1p3platform's platform, its HTTP side served on 127.0.0.1: (config, its URL)."""
    private, public = _pem_pair()
    registration = Registration()
    config = PlatformConfig(registration=registration)
    members = [
        {"user_id": "ada", "roles": [LEARNER], "status": "Active", "name": "Ada"},
        {"user_id": "bob", "roles": [LEARNER], "status": "Active", "name": "Bob"},
        {"user_id": "tina", "roles": [INSTRUCTOR], "status": "Active", "name": "Tina"},
    ]
    server = uvicorn.Server(
        uvicorn.Config(
            platform_app(config, members),
            host="127.0.0.1",
            port=0,
            log_config=None,
            access_log=False,
        )
    )
    task = asyncio.create_task(server.serve())
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    (
        registration.set_iss(url)
        .set_client_id(CLIENT_ID)
        .set_deployment_id(f"dep-{uuid.uuid4().hex[:8]}")
        .set_oidc_login_url(f"{gateway.url}/lti/login")
        .set_launch_url(f"{gateway.url}/lti/launch")
        .set_deeplink_launch_url(f"{gateway.url}/lti/launch")
        .set_platform_public_key(public)
        .set_platform_private_key(private)
        .set_tool_key_set_url(f"{gateway.url}/lti/jwks")
    )
    try:
        yield config, url
    finally:
        server.should_exit = True
        await task


async def _launch(
    client: httpx.AsyncClient, gateway: Gateway, config: PlatformConfig, build: Any
) -> httpx.Response:
    """lti1p3platform starts a login, Lectern redirects to the platform's auth endpoint, the
    platform signs its launch and the browser posts it (with Lectern's state cookie)."""
    login = Login(None, config)
    login.set_lti_message_hint(hint="message-1")
    started = await client.get(login.initiate_login("user-hint"))
    assert started.status_code == 302, started.text
    preflight = dict(parse_qsl(urlsplit(started.headers["location"]).query))
    launch = Launch(Preflight(preflight), config)
    build(launch)
    data = launch.lti_launch()
    cookie = started.headers["set-cookie"].split(";", 1)[0]
    return await client.post(
        data["launch_url"],
        data={"id_token": data["id_token"], "state": data["state"]},
        headers={"Cookie": cookie},
    )


async def test_lti1p3platform_launches_deep_links_and_serves_a_roster(
    gateway: Gateway, lms: tuple[PlatformConfig, str], tenant_id: str, db_pool: Any
) -> None:
    config, url = lms
    registration = config.registration
    admin = gateway.token(tenant_id, "root", role="admin")
    async with httpx.AsyncClient(timeout=30) as client:
        created = await client.post(
            f"{gateway.url}/v1/lti/registrations",
            headers=admin,
            json={
                "issuer": url,
                "client_id": CLIENT_ID,
                "deployment_ids": [registration.get_deployment_id()],
                "auth_url": f"{url}/auth",
                "token_url": f"{url}/token",
                "jwks_url": f"{url}/jwks",
            },
        )
        assert created.status_code == 201, created.text

        def student(launch: Launch) -> None:
            launch.set_user_data("ada", [LEARNER], full_name="Ada", email_address="ada@x.edu")
            launch.set_resource_link_claim("rl-1", title="Lectern")
            launch.set_launch_context_claim("course-x", context_title="Course X")
            launch.set_nrps(f"{url}/memberships")

        response = await _launch(client, gateway, config, student)
        assert response.status_code == 200, response.text
        landed = data_of(response.text)
        assert landed["lti"] == "land"
        mine = await client.get(
            f"{gateway.url}/v1/classes/mine", headers={"Authorization": f"Bearer {landed['token']}"}
        )
        assert mine.json()["classes"] == [landed["class-id"]]
        # the roster, read with an access token lti1p3platform issued for Lectern's assertion
        synced = await client.post(
            f"{gateway.url}/v1/lti/classes/{landed['class-id']}/roster-sync", headers=admin
        )
        assert synced.status_code == 200, synced.text
        assert (synced.json()["members"], synced.json()["students"]) == (3, 2)

        await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)

        def teacher(launch: Launch) -> None:
            launch.set_user_data("tina", [INSTRUCTOR], full_name="Tina")
            launch.set_launch_context_claim("course-x", context_title="Course X")
            launch.set_dl(f"{url}/deep-link-return", accept_types={"ltiResourceLink"})

        picker = await _launch(client, gateway, config, teacher)
        assert picker.status_code == 200, picker.text
        deep_link = picker.text.split('action="/lti/deep-links/')[1].split('"')[0]
        document = picker.text.split('value="document:')[1].split('"')[0]
        posted = await client.post(
            f"{gateway.url}/lti/deep-links/{deep_link}", data={"item": f"document:{document}"}
        )
        assert posted.status_code == 200, posted.text
        action, fields = form_of(posted.text)
        assert action == f"{url}/deep-link-return"
        # lti1p3platform checks the signed response against Lectern's published keys
        items = await asyncio.to_thread(config.validate_deeplinking_resp, fields)
        assert items == [
            {
                "type": "ltiResourceLink",
                "title": "Biology notes",
                "url": f"{gateway.url}/lti/launch",
                "custom": {"lectern_target": f"document:{document}"},
            }
        ]
