"""Postgres going away under the gateway: requests during the outage get 503 problem+json
with Retry-After within a bounded time (never a hang, never a 500), a chat turn ends with
a retryable SSE ``error``, and the pool recovers on its own once Postgres is back.

The gateway reaches the real Postgres through a TCP proxy this test controls, so the
outage is real sockets being cut, not a patched pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    gateway_settings,
    run_responders,
    serve_gateway,
)
from lectern_testing.pgproxy import PostgresProxy

pytestmark = pytest.mark.integration

# an outage answer must come well inside this (connect timeout 1 s in these tests)
BOUNDED_S = 8.0


@pytest.fixture
async def gateway(
    nats_url: str, db_pool: Any, postgres_proxy: tuple[PostgresProxy, str]
) -> AsyncIterator[Gateway]:
    settings = gateway_settings(
        nats_url,
        postgres_proxy[1],
        db_connect_timeout_s=1.0,
        db_command_timeout_s=2.0,
        db_pool_max=4,
    )
    async with run_responders(nats_url, Responders(pool=db_pool)), serve_gateway(settings) as gw:
        yield gw


def _assert_unavailable(response: httpx.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["retry-after"]) > 0
    assert response.json()["reason"] == "database_unavailable"
    assert elapsed < BOUNDED_S, f"took {elapsed:.1f} s"


async def _timed(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> Any:
    started = time.perf_counter()
    response = await client.request(method, url, **kw)
    return response, time.perf_counter() - started


async def _sse_error(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> str:
    """POST a chat message; the problem status or the reason of the stream's error event."""
    async with client.stream("POST", url, headers=headers, json={"content": "mitosis?"}) as r:
        if r.status_code != 200:
            await r.aread()
            return f"{r.status_code}:{r.json().get('reason')}"
        body = (await r.aread()).decode()
    assert "event: error" in body, body
    return "error:" + body.split('"reason":"', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
async def test_requests_during_an_outage_get_503_and_the_pool_recovers(
    gateway: Gateway, postgres_proxy: tuple[PostgresProxy, str], tenant_id: str, mode: str
) -> None:
    pg, _ = postgres_proxy
    student = gateway.token(tenant_id, "sam")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        session = await client.post("/v1/sessions", headers=student, json={"mode": "chat"})
        assert session.status_code == 201, session.text
        messages = f"/v1/sessions/{session.json()['id']}/messages"

        pg.cut(mode)
        for method, url, kw in [
            ("GET", "/v1/sessions", {}),
            ("POST", "/v1/sessions", {"json": {"mode": "chat"}}),
            ("GET", messages, {}),
        ]:
            response, elapsed = await _timed(client, method, url, headers=student, **kw)
            _assert_unavailable(response, elapsed)
        started = time.perf_counter()
        outcome = await _sse_error(client, messages, student)
        assert outcome in {"503:database_unavailable", "error:database_unavailable"}, outcome
        assert time.perf_counter() - started < BOUNDED_S
        ready = await client.get("/readyz")
        assert ready.status_code == 503, ready.text

        pg.restore()
        deadline = time.monotonic() + 15
        while True:  # the pool reconnects by itself: no restart of the gateway
            listed = await client.get("/v1/sessions", headers=student)
            if listed.status_code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert listed.status_code == 200, listed.text
        assert (await client.get("/readyz")).status_code == 200
        again = await client.post("/v1/sessions", headers=student, json={"mode": "chat"})
        assert again.status_code == 201, again.text
