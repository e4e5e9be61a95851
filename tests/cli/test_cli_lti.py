"""`lectern lti ...` against a real gateway: registrations, a Dynamic Registration URL, key
rotation and the scores listing, admins only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from lectern_testing.chat import Gateway, gateway_settings, serve_gateway

from lectern_cli.main import main

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str) -> AsyncIterator[Gateway]:
    async with serve_gateway(gateway_settings(nats_url, database_url)) as running:
        yield running


async def _lectern(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_register_list_invite_rotate_and_delete_through_the_cli(
    gateway: Gateway,
    tenant_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LECTERN_GATEWAY_URL", gateway.url)
    admin = gateway.token(tenant_id, "root", role="admin")["Authorization"].split()[1]
    monkeypatch.setenv("LECTERN_TOKEN", admin)
    lms = "https://lms.example.edu"
    code = await _lectern(
        "lti",
        "register",
        "--issuer",
        lms,
        "--client-id",
        "abc",
        "--deployment-id",
        "d1",
        "--deployment-id",
        "d2",
        "--auth-url",
        f"{lms}/auth",
        "--token-url",
        f"{lms}/token",
        "--jwks-url",
        f"{lms}/jwks",
        "--json",
    )
    assert code == 0
    created = json.loads(capsys.readouterr().out)
    assert created["deployment_ids"] == ["d1", "d2"] and created["source"] == "manual"
    assert await _lectern("lti", "list") == 0
    listed = capsys.readouterr().out
    assert created["id"] in listed and "deployments d1, d2" in listed
    assert await _lectern("lti", "update", created["id"], "--deployment-id", "d3") == 0
    assert "deployments d3" in capsys.readouterr().out
    assert await _lectern("lti", "invite") == 0
    assert capsys.readouterr().out.strip().startswith(f"{gateway.url}/lti/register?invite=")
    assert await _lectern("lti", "rotate-key", "--json") == 0
    assert json.loads(capsys.readouterr().out)["kid"]
    assert await _lectern("lti", "scores") == 0
    assert capsys.readouterr().out.strip() == "no scores"
    # an insecure URL is refused with the gateway's reason, and nothing is stored
    code = await _lectern(
        "lti",
        "register",
        "--issuer",
        "http://lms.example.edu",
        "--client-id",
        "x",
        "--deployment-id",
        "d9",
        "--auth-url",
        f"{lms}/auth",
        "--token-url",
        f"{lms}/token",
        "--jwks-url",
        f"{lms}/jwks",
    )
    assert code == 1 and "https" in capsys.readouterr().err
    assert await _lectern("lti", "delete", created["id"]) == 0
    capsys.readouterr()
    assert await _lectern("lti", "list") == 0
    assert capsys.readouterr().out.strip() == "no LTI platforms registered"
    # a teacher may not
    teacher = gateway.token(tenant_id, "t", role="teacher")["Authorization"].split()[1]
    assert await _lectern("lti", "list", "--token", teacher) == 1
    assert "403" in capsys.readouterr().err
