"""The memory service as deployed: JetStream consumers, recall over NATS, gateway deletion."""

import asyncio
import json
import uuid
from typing import Any

import httpx
import nats
import pytest

from lectern_common.broker import create_broker, request, stream_for
from lectern_common.events import (
    ChatSessionEnded,
    ChatTurnCompleted,
    FeedbackFlagged,
    MemoryDistilled,
    MemoryRecallReply,
    MemoryRecallRequest,
)
from lectern_gateway.app import create_app as create_gateway
from lectern_gateway.auth import issue_token
from lectern_gateway.config import Settings as GatewaySettings
from lectern_memory.app import FLAGS_DURABLE, create_app
from lectern_memory.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def distillations_of(nc: Any, session_id: uuid.UUID) -> asyncio.Queue[MemoryDistilled]:
    """The ``memory.distilled`` events of one session, as they are published."""
    distilled: asyncio.Queue[MemoryDistilled] = asyncio.Queue()

    async def on_distilled(msg: Any) -> None:
        event = MemoryDistilled.model_validate(json.loads(msg.data))
        if event.session_id == session_id:
            await distilled.put(event)

    await nc.subscribe(MemoryDistilled.subject, cb=on_distilled)
    return distilled


async def test_session_is_distilled_recalled_and_forgotten(
    memory_settings: Settings, nats_url: str, database_url: str, tenant_id: str
) -> None:
    app = create_app(memory_settings)
    gateway = create_gateway(
        GatewaySettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    )
    session_id = uuid.uuid4()
    nc = await nats.connect(nats_url)
    distilled = await distillations_of(nc, session_id)
    js = nc.jetstream()
    client = create_broker(nats_url, service_name="test-client")
    async with app.router.lifespan_context(app), gateway.router.lifespan_context(gateway), client:
        await client.start()
        turn = ChatTurnCompleted(
            tenant_id=tenant_id, session_id=session_id, user_id="stu",
            user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(),
            question="I'm totally lost on ionic bonds. Why do they form?",
            answer="Electrons transfer between atoms [T1].", confidence=0.85, band="high",
            topic="chemistry", topics=["ionic bonds"],
        )  # fmt: skip
        ended = ChatSessionEnded(
            tenant_id=tenant_id, session_id=session_id, user_id="stu", message_count=2
        )
        # the end can overtake the turn: the consumer must wait for it, not lose it
        await js.publish(ended.subject, ended.model_dump_json().encode())
        await js.publish(ended.subject, ended.model_dump_json().encode())  # re-delivery
        await asyncio.sleep(0.5)
        await js.publish(turn.subject, turn.model_dump_json().encode())
        event = await asyncio.wait_for(distilled.get(), 30)
        assert len(event.created) == 1
        reply = await request(
            client,
            MemoryRecallRequest(tenant_id=tenant_id, user_id="stu", query="ionic bonding"),
            MemoryRecallReply,
            timeout=10,
        )
        assert [m.kind for m in reply.memories] == ["struggle"]
        rows = await _count(database_url, tenant_id)
        assert rows == 1, "a re-delivered session.ended must not duplicate memories"

        token = issue_token(
            secret=memory_settings.effective_jwt_secret, tenant_id=tenant_id, user_id="stu",
            role="student",
        )  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"}
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            listed = (await http.get("/v1/me/memories", headers=headers)).json()
            assert [m["topic"] for m in listed] == ["ionic bonds"]
            other = issue_token(
                secret=memory_settings.effective_jwt_secret, tenant_id=tenant_id,
                user_id="someone-else", role="student",
            )  # fmt: skip
            denied = await http.delete(
                f"/v1/me/memories/{listed[0]['id']}", headers={"Authorization": f"Bearer {other}"}
            )
            assert denied.status_code == 404
            assert denied.headers["content-type"] == "application/problem+json"
            gone = await http.delete("/v1/me/memories", headers=headers)
            assert gone.json() == {"deleted": 1}
        after = await request(
            client,
            MemoryRecallRequest(tenant_id=tenant_id, user_id="stu", query="ionic bonding"),
            MemoryRecallReply,
            timeout=10,
        )
        assert after.memories == []
    await nc.close()


async def test_a_flag_through_nats_makes_the_distillation_count_the_answer_flagged(
    memory_settings: Settings, nats_url: str, db_pool: Any, tenant_id: str
) -> None:
    """``feedback.flagged`` on JetStream reaches the memory service's own table
    (``lectern-memory-flags``), before its turn and twice (a re-delivery, recorded once); the
    session's distillation then counts the answer as flagged: a plain question answered
    confidently is a struggle only because of the flag."""
    app = create_app(memory_settings)
    session_id = uuid.uuid4()
    nc = await nats.connect(nats_url)
    distilled = await distillations_of(nc, session_id)
    js = nc.jetstream()
    turn = ChatTurnCompleted(
        tenant_id=tenant_id, session_id=session_id, user_id="stu",
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(),
        question="What is osmosis?", answer="Water moves across a membrane [T1].",
        confidence=0.9, band="high", topic="osmosis", topics=["osmosis"],
    )  # fmt: skip
    flag = FeedbackFlagged(
        tenant_id=tenant_id, flag_id=uuid.uuid4(), message_id=turn.assistant_message_id,
        session_id=session_id, user_id="stu", reason="unclear",
    )  # fmt: skip
    ended = ChatSessionEnded(
        tenant_id=tenant_id, session_id=session_id, user_id="stu", message_count=2,
        flagged_messages=1,
    )  # fmt: skip
    async with app.router.lifespan_context(app):
        for _ in range(2):  # no Nats-Msg-Id: JetStream keeps both, the consumer sees both
            await js.publish(flag.subject, flag.model_dump_json().encode())
        await _drained(js, stream_for(flag.subject).name, FLAGS_DURABLE)
        assert await _flags(db_pool, tenant_id) == [flag.flag_id]  # before its turn, once
        await js.publish(turn.subject, turn.model_dump_json().encode())
        await js.publish(ended.subject, ended.model_dump_json().encode())
        event = await asyncio.wait_for(distilled.get(), 30)
    await nc.close()
    rows = await db_pool.fetch(
        "SELECT kind, topic, evidence FROM user_memories WHERE tenant_id = $1", tenant_id
    )
    assert [(r["kind"], r["topic"]) for r in rows] == [("struggle", "osmosis")]
    assert [e["kind"] for e in rows[0]["evidence"]] == ["flagged"]
    assert event.created and len(event.created) == 1
    assert await _flags(db_pool, tenant_id) == [flag.flag_id]


async def _flags(pool: Any, tenant_id: str) -> list[uuid.UUID]:
    rows = await pool.fetch("SELECT flag_id FROM memory_flags WHERE tenant_id = $1", tenant_id)
    return [r["flag_id"] for r in rows]


async def _drained(js: Any, stream: str, durable: str) -> None:
    """Wait until the durable consumer has every message of its stream delivered and acked."""
    deadline = asyncio.get_running_loop().time() + 20
    while asyncio.get_running_loop().time() < deadline:
        info = await js.consumer_info(stream, durable)
        if info.num_pending == 0 and info.num_ack_pending == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{durable} did not drain {stream}")


async def _count(database_url: str, tenant_id: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        value: int = await conn.fetchval(
            "SELECT count(*) FROM user_memories WHERE tenant_id = $1", tenant_id
        )
        return value
    finally:
        await conn.close()
