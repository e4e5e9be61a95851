"""Issue 7's scenario: two sessions through the real gateway (offline answerer) and the real
memory service. What the student found hard in the first session is in the second one's
prompt; re-delivery does not duplicate; deletion is honoured at once; students are apart."""

import asyncio
import uuid
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

from lectern_common.embeddings import Embedder
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


async def test_a_struggle_said_in_own_words_is_remembered_with_its_evidence_and_revisited(
    stack: tuple[Gateway, Responders], db_pool: Any, tenant_id: str
) -> None:
    """Issue 31: confusion in the student's words is a struggle named by what confused them
    (not a preference, not "mastered"); the next tutor session on it starts from it."""
    gateway, responders = stack
    responders.band = "high"
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "noor")
    async with httpx.AsyncClient(timeout=60) as client:
        first = await new_session(client, gateway, headers, subject="biology", mode="tutor")
        await ask(client, gateway, first["id"], "What does the Calvin cycle produce?", headers)
        await ask(client, gateway, first["id"], "I still find the Calvin cycle really "
                  "confusing, can you explain it again more simply?", headers)  # fmt: skip
        ended = await client.post(f"{gateway.url}/v1/sessions/{first['id']}/end", headers=headers)
        assert ended.status_code == 200
        rows = await wait_for_memories(db_pool, tenant_id, "noor")
        assert [(r["kind"], r["topic"]) for r in rows if r["kind"] != "takeaway"] == [
            ("struggle", "calvin cycle")
        ]
        listed = (await client.get(f"{gateway.url}/v1/me/memories", headers=headers)).json()
        (struggle,) = [m for m in listed if m["kind"] == "struggle"]
        assert [e["kind"] for e in struggle["evidence"]] == ["said"]
        assert "confusing" in struggle["evidence"][0]["detail"]
        assert struggle["because"].startswith("said so 1 time on ")

        second = await new_session(client, gateway, headers, subject="biology", mode="tutor")
        again = await ask(client, gateway, second["id"], "How does the Calvin cycle fix carbon?",
                          headers)  # fmt: skip
        assert again.text.startswith("Last time you found calvin cycle hard")
        assert struggle["text"] in again.done.memories_used
        assert again.of("check")  # and it is checked


async def test_a_mastered_topic_is_not_explained_again_at_length(
    stack: tuple[Gateway, Responders], db_pool: Any, tenant_id: str, embedder: Embedder
) -> None:
    gateway, responders = stack
    responders.band = "high"
    await seed_document(db_pool, tenant_id=tenant_id)
    text = "Answered check questions on calvin cycle right twice running"
    (vector,) = await embedder.embed_documents([text])
    await db_pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding, "
        "evidence) VALUES ($1, $2, 'ines', 'mastered', $3, 'calvin cycle', $4, $5::jsonb)",
        uuid.uuid4(), tenant_id, text, vector,
        [{"kind": "check_right", "detail": "calvin cycle", "at": ""}] * 2,
    )  # fmt: skip
    headers = gateway.token(tenant_id, "ines")
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, headers, subject="biology", mode="tutor")
        got = await ask(client, gateway, session["id"], "What does the Calvin cycle do?", headers)
    assert got.text.startswith("You've already shown you know calvin cycle, so briefly:")
    assert text in got.done.memories_used
    answer = got.text.split("Check your understanding:")[0]
    assert answer.count("[T") <= 2  # two sentences at most
