"""`lectern apikey create|list|revoke` against a real gateway (admins only; tenant-scoped)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from lectern_testing.chat import Gateway, gateway_settings, serve_gateway

from lectern_cli.apikey_cmd import format_keys
from lectern_cli.main import main
from lectern_gateway.auth import Role

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str) -> AsyncIterator[Gateway]:
    """The gateway on a free port."""
    async with serve_gateway(gateway_settings(nats_url, database_url)) as running:
        yield running


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LECTERN_TOKEN", raising=False)
    monkeypatch.delenv("LECTERN_GATEWAY_URL", raising=False)


def _bearer(gateway: Gateway, tenant_id: str, role: Role) -> str:
    return gateway.token(tenant_id, f"{role}-1", role=role)["Authorization"].split()[1]


async def _lectern(*argv: str) -> int:
    # the CLI is synchronous: run it off the loop that serves the gateway
    return await asyncio.to_thread(main, list(argv))


async def test_create_list_and_revoke_through_the_cli(
    gateway: Gateway,
    tenant_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LECTERN_GATEWAY_URL", gateway.url)
    monkeypatch.setenv("LECTERN_TOKEN", _bearer(gateway, tenant_id, "admin"))
    assert await _lectern("apikey", "create", "--name", "lms-sync", "--plan", "free") == 0
    captured = capsys.readouterr()
    key = captured.out.strip()
    assert key.startswith("lk_") and "\n" not in key  # stdout holds the key only
    assert "shown only this once" in captured.err
    async with httpx.AsyncClient(timeout=30) as client:
        ok = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers={"X-API-Key": key})
        assert ok.status_code == 200  # a teacher key by default

        assert await _lectern("apikey", "list", "--json") == 0
        (listed,) = json.loads(capsys.readouterr().out)
        assert listed["name"] == "lms-sync" and listed["plan"] == "free"
        assert listed["role"] == "teacher" and listed["revoked_at"] is None
        assert await _lectern("apikey", "list") == 0
        table = capsys.readouterr().out
        assert listed["id"] in table and "active" in table and key not in table

        assert await _lectern("apikey", "revoke", listed["id"]) == 0
        assert f"revoked API key {listed['id']}" in capsys.readouterr().out
        refused = await client.get(f"{gateway.url}/v1/knowledge-gaps", headers={"X-API-Key": key})
        assert refused.status_code == 401  # at once
    assert await _lectern("apikey", "list") == 0
    assert "revoked" in capsys.readouterr().out


async def test_the_cli_reports_refusals(
    gateway: Gateway, tenant_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    teacher = _bearer(gateway, tenant_id, "teacher")
    code = await _lectern(
        "apikey", "create", "--name", "x", "--url", gateway.url, "--token", teacher
    )
    assert code == 1
    assert "403" in capsys.readouterr().err
    admin = _bearer(gateway, tenant_id, "admin")
    code = await _lectern(
        "apikey", "revoke", "00000000-0000-0000-0000-000000000000", "--url", gateway.url,
        "--token", admin,
    )  # fmt: skip
    assert code == 1
    assert "404" in capsys.readouterr().err
    assert await _lectern("apikey", "list", "--url", gateway.url) == 1
    assert "a token is needed" in capsys.readouterr().err


def test_format_keys() -> None:
    assert format_keys([]) == "no API keys"
    line = format_keys(
        [
            {
                "id": "k1", "name": "lms", "role": "teacher", "plan": "pro",
                "created_at": "2025-01-02T03:04:05Z", "revoked_at": None,
            }
        ]
    )  # fmt: skip
    assert line.split() == ["k1", "active", "teacher", "pro", "2025-01-02", "03:04:05", "lms"]
