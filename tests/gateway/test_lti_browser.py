"""An LTI launch in headless Chromium: the browser goes to Lectern's login initiation, the
test platform's auth page posts the signed launch back, and Lectern's landing page (its
script, ``static/lti.js``) stores the sign-in and opens the web UI signed in for the course's
class. Skips without Chromium, as the web UI's browser tests do (``make system-deps``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from lectern_testing.chat import Gateway, offline_gateway
from lectern_testing.lti_platform import Platform, serve_platform

from tests.gateway.test_web_ui_browser import chromium

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed"),
]


async def in_frame(page: Any, expression: str, timeout: float = 20.0) -> Any:
    """The first truthy value of ``expression`` in the tool's frame (navigations waited out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = page.page.frame(name="tool")
        try:
            value = await frame.evaluate(expression) if frame is not None else None
        except Exception:  # the frame navigating meanwhile
            value = None
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout} s in the tool's frame: {expression}")


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


async def test_a_launch_in_a_browser_lands_signed_in_in_the_web_ui(
    gateway: Gateway, tenant_id: str
) -> None:
    async with serve_platform(Platform(deployment_id=f"dep-{tenant_id}")) as lms:
        lms.tool_launch_url = f"{gateway.url}/lti/launch"
        lms.tool_jwks_url = f"{gateway.url}/lti/jwks"
        async with httpx.AsyncClient(timeout=30) as client:
            created = await client.post(
                f"{gateway.url}/v1/lti/registrations",
                headers=gateway.token(tenant_id, "root", role="admin"),
                json={
                    "issuer": lms.issuer,
                    "client_id": lms.client_id,
                    "deployment_ids": [lms.deployment_id],
                    "auth_url": f"{lms.url}/auth",
                    "token_url": f"{lms.url}/token",
                    "jwks_url": f"{lms.url}/jwks",
                },
            )
            assert created.status_code == 201, created.text
        lms.course("course-b", [{"user_id": "stu-b", "roles": [], "status": "Active"}])
        hint = lms.prepare(sub="stu-b", course_id="course-b", name="Bea Browser")
        query = {
            "iss": lms.issuer,
            "login_hint": "stu-b",
            "target_link_uri": lms.tool_launch_url,
            "lti_message_hint": hint,
            "client_id": lms.client_id,
            "lti_deployment_id": lms.deployment_id,
        }
        async with chromium() as page:
            await page.goto(f"{gateway.url}/lti/login?{urlencode(query)}")
            await page.until("location.pathname === '/' && document.body.dataset.ready === 'true'")
            await page.until("!document.getElementById('whoami').hidden")
            await page.until("!document.getElementById('view-chat').hidden")
            assert "student" in await page.text("#whoami-text")
            token = await page.js("sessionStorage.getItem('lectern.token')")
            class_id = await page.js("sessionStorage.getItem('lectern.class')")
            assert class_id and class_id.startswith("lti-")
            assert await page.js("location.hash") == "#chat"
            assert page.exceptions == []
        async with httpx.AsyncClient(timeout=30) as client:
            mine = await client.get(
                f"{gateway.url}/v1/classes/mine", headers={"Authorization": f"Bearer {token}"}
            )
        assert mine.json()["classes"] == [class_id]


async def test_without_the_cookie_the_platform_storage_carries_the_login_in_a_frame(
    gateway: Gateway, tenant_id: str
) -> None:
    """Framed in the LMS's course page, third-party cookies lost: the login page keeps its
    secret in the platform's postMessage storage, the launch reads it back, and the landing
    page (the web UI may not be framed here) offers the UI in a new window."""
    async with serve_platform(Platform(deployment_id=f"dep-{tenant_id}")) as lms:
        lms.tool_launch_url = f"{gateway.url}/lti/launch"
        lms.tool_jwks_url = f"{gateway.url}/lti/jwks"
        lms.hold_launch = True
        async with httpx.AsyncClient(timeout=30) as client:
            created = await client.post(
                f"{gateway.url}/v1/lti/registrations",
                headers=gateway.token(tenant_id, "root", role="admin"),
                json={
                    "issuer": lms.issuer,
                    "client_id": lms.client_id,
                    "deployment_ids": [lms.deployment_id],
                    "auth_url": f"{lms.url}/auth",
                    "token_url": f"{lms.url}/token",
                    "jwks_url": f"{lms.url}/jwks",
                },
            )
            assert created.status_code == 201, created.text
        lms.course("course-f", [{"user_id": "stu-f", "roles": [], "status": "Active"}])
        hint = lms.prepare(sub="stu-f", course_id="course-f")
        query = {
            "iss": lms.issuer,
            "login_hint": "stu-f",
            "target_link_uri": lms.tool_launch_url,
            "lti_message_hint": hint,
            "client_id": lms.client_id,
            "lti_deployment_id": lms.deployment_id,
            "lti_storage_target": "_parent",
        }
        login = f"{gateway.url}/lti/login?{urlencode(query)}"
        async with chromium() as page:
            await page.goto(f"{lms.url}/course-page?{urlencode({'src': login})}")
            # the login page put the secret in the platform's storage, then went on
            await in_frame(page, "location.pathname === '/auth' && document.forms.length === 1")
            assert await page.js("Object.keys(store).length") == 1
            await page.page.context.clear_cookies()  # the third-party cookie is lost
            await in_frame(page, "document.forms[0].submit() || true")
            # the recover page read it back and posted the launch again: landed
            data = await in_frame(
                page,
                "document.body && document.body.dataset.lti === 'land' "
                "&& JSON.stringify(document.body.dataset)",
            )
            assert json.loads(data)["framable"] == "false"
            href = await in_frame(page, "document.querySelector('a[target=_blank]').href")
            assert "/#lti-token=" in href and href.endswith("&view=chat")
            # framed where the UI may not be: nothing stored, the page stays for the link
            assert await in_frame(page, "String(sessionStorage.length)") == "0"
            # the link followed (top level, as the new window is): the web UI signed in, the
            # token taken off the URL at once
            await page.goto(href)
            await page.until("!document.getElementById('whoami').hidden")
            assert "student" in await page.text("#whoami-text")
            assert await page.js("location.hash") == "#chat"
            assert await page.js("sessionStorage.getItem('lectern.token')")
            assert page.exceptions == []
