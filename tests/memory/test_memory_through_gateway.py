"""Issue 7's scenario: two sessions through the real gateway (offline answerer) and the real
memory service. What the student found hard in the first session is in the second one's
prompt; re-delivery does not duplicate; deletion is honoured at once; students are apart."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_memory.app import create_app
from lectern_memory.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
async def stack(
    nats_url: str, database_url: str, db_pool: Any, memory_settings: Settings
) -> AsyncIterator[tuple[Gateway, Responders]]:
    """Gateway + real memory service + scripted retriever/re-ranker stand-ins."""
    memory = create_app(memory_settings)
    responders = Responders(pool=db_pool, band="low")
    settings = gateway_settings(nats_url, database_url, memory_timeout_s=5.0)
    async with (
        memory.router.lifespan_context(memory),
        run_responders(nats_url, responders),
        serve_gateway(settings) as gateway,
    ):
        yield gateway, responders


async def wait_for_memories(pool: Any, tenant_id: str, user_id: str) -> list[Any]:
    for _ in range(300):
        rows = await pool.fetch(
            "SELECT id, kind, topic, text FROM user_memories WHERE tenant_id = $1 AND user_id = $2",
            tenant_id,
            user_id,
        )
        if rows:
            return list(rows)
        await asyncio.sleep(0.1)
    raise AssertionError("no memory was distilled within 30 s")


async def test_struggle_from_session_one_is_in_session_two_prompt(
    stack: tuple[Gateway, Responders], db_pool: Any, tenant_id: str
) -> None:
    gateway, responders = stack
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "maya")
    async with httpx.AsyncClient(timeout=60) as client:
        first = await new_session(client, gateway, headers, subject="biology")
        got = await ask(client, gateway, first["id"], "How does the Calvin cycle fix carbon?",
                        headers)  # fmt: skip
        assert got.done.band == "low"
        again = await ask(client, gateway, first["id"], "Calvin cycle carbon fixation again?",
                          headers)  # fmt: skip
        assert again.done.memories_used == []
        ended = await client.post(f"{gateway.url}/v1/sessions/{first['id']}/end", headers=headers)
        assert ended.status_code == 200
        rows = await wait_for_memories(db_pool, tenant_id, "maya")
        struggles = [r for r in rows if r["kind"] == "struggle"]
        assert len(struggles) == 1, rows
        # a second end (e.g. the idle sweep racing the button) re-delivers nothing new
        await client.post(f"{gateway.url}/v1/sessions/{first['id']}/end", headers=headers)
        await asyncio.sleep(1.0)
        assert len(await wait_for_memories(db_pool, tenant_id, "maya")) == len(rows)

        responders.band = "high"
        second = await new_session(client, gateway, headers, subject="biology")
        answer = await ask(client, gateway, second["id"], "What does the Calvin cycle produce?",
                           headers)  # fmt: skip
        assert struggles[0]["text"] in answer.done.memories_used
        assert answer.done.answered_by == "offline"

        # another student recalls nothing of Maya's
        other = gateway.token(tenant_id, "leo")
        theirs = await new_session(client, gateway, other, subject="biology")
        leo = await ask(client, gateway, theirs["id"], "What does the Calvin cycle produce?",
                        other)  # fmt: skip
        assert leo.done.memories_used == []

        # forgetting is honoured at once
        forgot = await client.delete(f"{gateway.url}/v1/me/memories", headers=headers)
        assert forgot.json()["deleted"] == len(rows)
        after = await ask(client, gateway, second["id"], "And what does RuBisCO do?", headers)
        assert after.done.memories_used == []
