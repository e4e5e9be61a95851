"""The transactional outbox: NATS refusing the gateway's publishes loses no event and
duplicates none.

The gateway reaches NATS through a loopback TCP proxy. While the proxy refuses connections, a
question is answered, its answer flagged and its session ended: each change commits with its
event in the outbox, and the relay's publishes fail (counted in ``outbox.attempts``). When
NATS is back, every event arrives on its stream exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Responders,
    ask,
    gateway_settings,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)
from lectern_testing.metrics import sample_total
from lectern_testing.pgproxy import PostgresProxy

from lectern_common.events import Subjects

pytestmark = pytest.mark.integration


@pytest.fixture
async def nats_proxy(nats_url: str) -> AsyncIterator[tuple[PostgresProxy, str]]:
    """A TCP proxy in front of the session's NATS (the proxy is protocol-agnostic)."""
    host, port = nats_url.removeprefix("nats://").rsplit(":", 1)
    proxy = PostgresProxy((host, int(port)))
    await proxy.start()
    try:
        yield proxy, f"nats://127.0.0.1:{proxy.port}"
    finally:
        await proxy.stop()


async def _pending(pool: Any, tenant_id: str) -> list[Any]:
    return list(
        await pool.fetch(
            "SELECT subject, attempts, last_error FROM outbox "
            "WHERE published_at IS NULL AND payload->>'tenant_id' = $1 ORDER BY created_at",
            tenant_id,
        )
    )


async def test_events_written_while_nats_refuses_arrive_once_it_is_back(
    nats_url: str,
    database_url: str,
    db_pool: Any,
    tenant_id: str,
    jetstream: Any,
    nats_proxy: tuple[PostgresProxy, str],
) -> None:
    proxy, proxied_url = nats_proxy
    await seed_document(db_pool, tenant_id=tenant_id)
    # the relay's patience shortened (not its logic): a refused publish fails after 1 s, not
    # 5, and its row is tried again after 0.25 s, doubling (the test waits for a second try)
    settings = gateway_settings(
        proxied_url,
        database_url,
        outbox_poll_s=0.25,
        outbox_publish_timeout_s=1.0,
        outbox_first_backoff_s=0.25,
    )
    async with (
        run_responders(nats_url, Responders(pool=db_pool)),
        serve_gateway(settings) as gateway,
        httpx.AsyncClient(timeout=60) as client,
    ):
        student = gateway.token(tenant_id, "stu-1")
        session = await new_session(client, gateway, student)
        got = await ask(client, gateway, session["id"], "What does RuBisCO catalyse?", student)
        assert got.done is not None
        await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id)

        proxy.cut("refuse")  # NATS is gone for the gateway
        flagged = await client.post(
            f"{gateway.url}/v1/messages/{got.done.message_id}/flags",
            json={"reason": "unclear"},
            headers=student,
        )
        assert flagged.status_code == 201, flagged.text
        ended = await client.post(f"{gateway.url}/v1/sessions/{session['id']}/end", headers=student)
        assert ended.status_code == 200 and ended.json()["ended"] is True
        # a retried end is not a second event
        again = await client.post(f"{gateway.url}/v1/sessions/{session['id']}/end", headers=student)
        assert again.json()["ended"] is False
        await _wait_for_a_refused_publish(db_pool, tenant_id)
        scrape = (await client.get(f"{gateway.url}/metrics")).text
        assert sample_total(scrape, "lectern_outbox_backlog") >= 1

        proxy.restore()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not await _pending(db_pool, tenant_id):
                break
            await asyncio.sleep(0.25)
        assert await _pending(db_pool, tenant_id) == []

    turns = await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id)
    flags = await published(jetstream, Subjects.FEEDBACK_FLAGGED, tenant_id)
    ends = await published(jetstream, Subjects.CHAT_SESSION_ENDED, tenant_id)
    assert [t["assistant_message_id"] for t in turns] == [str(got.done.message_id)]
    assert [f["flag_id"] for f in flags] == [flagged.json()["id"]]
    assert [(e["session_id"], e["reason"]) for e in ends] == [(session["id"], "explicit")]
    sent = await db_pool.fetch(
        "SELECT id, payload->>'event_id' AS event_id FROM outbox WHERE payload->>'tenant_id' = $1",
        tenant_id,
    )
    assert {uuid.UUID(r["event_id"]) for r in sent} == {r["id"] for r in sent}


async def _wait_for_a_refused_publish(pool: Any, tenant_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = await _pending(pool, tenant_id)
        # the oldest event is retried first: the others wait behind it, in order
        if len(rows) == 2 and rows[0]["attempts"] >= 2 and rows[0]["last_error"]:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"no refused publish recorded: {await _pending(pool, tenant_id)}")
