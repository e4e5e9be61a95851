"""The memory service's handlers in memory (FastStream's ``TestNatsBroker``) over the
session's Postgres: typed events are recorded and erased, a recall request gets a typed reply,
the gateway's requests (list, topics, export, forget) answer from the tables memory owns, and
a message that does not decode is parked (an event) or answered ``bad_input`` (a request),
never retried for ever nor lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import numpy as np
import pytest
from faststream.nats import NatsBroker, TestNatsBroker
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

from lectern_common.broker import create_broker, stream_for
from lectern_common.embeddings import Embedder
from lectern_common.events import (
    ChatSessionsExpired,
    ChatTurnCompleted,
    FeedbackFlagged,
    MemoryExportReply,
    MemoryExportRequest,
    MemoryForgetReply,
    MemoryForgetRequest,
    MemoryListReply,
    MemoryListRequest,
    MemoryRecallReply,
    MemoryRecallRequest,
    MemoryTopicsReply,
    MemoryTopicsRequest,
    MessageParked,
    Reply,
    Request,
    Subjects,
    UserErased,
)
from lectern_common.service import ServiceState
from lectern_memory.app import subscribe
from lectern_memory.config import Settings
from lectern_memory.service import MemoryService

pytestmark = pytest.mark.integration

R = TypeVar("R", bound=Reply)


@pytest.fixture
async def memory_broker(
    memory_settings: Settings, db_pool: Any, embedder: Embedder
) -> AsyncIterator[NatsBroker]:
    """The memory service's subscribers on an in-memory broker, over the session's Postgres."""
    broker = create_broker("nats://127.0.0.1:4222", service_name="lectern-memory")
    state = ServiceState(settings=memory_settings, broker=broker, pool=db_pool)
    service = MemoryService(settings=memory_settings, embedder=embedder)
    await service.embedder.sync(db_pool)
    subscribe(broker, settings=memory_settings, state=state, service=lambda: service)
    async with TestNatsBroker(broker) as br:
        yield br


def turn(tenant_id: str, user_id: str) -> ChatTurnCompleted:
    return ChatTurnCompleted(
        tenant_id=tenant_id, session_id=uuid.uuid4(), user_id=user_id,
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(),
        question="Why do ionic bonds form?", answer="Electrons transfer [T1].",
        confidence=0.8, band="high", topic="chemistry",
    )  # fmt: skip


async def publish(broker: NatsBroker, body: Any, subject: str) -> None:
    await broker.publish(body, subject, stream=stream_for(subject).name)


async def signals(pool: Any, tenant_id: str, user_id: str) -> int:
    count: int = await pool.fetchval(
        "SELECT count(*) FROM memory_turn_signals WHERE tenant_id = $1 AND user_id = $2",
        tenant_id,
        user_id,
    )
    return count


async def test_turns_are_recorded_and_erased(
    memory_broker: NatsBroker, db_pool: Any, tenant_id: str
) -> None:
    event = turn(tenant_id, "stu")
    await publish(memory_broker, event.model_dump(mode="json"), Subjects.CHAT_TURN_COMPLETED)
    assert await signals(db_pool, tenant_id, "stu") == 1
    erased = UserErased(tenant_id=tenant_id, user_id="stu")
    await publish(memory_broker, erased.model_dump(mode="json"), Subjects.USERS_ERASED)
    assert await signals(db_pool, tenant_id, "stu") == 0
    # a turn that occurred before the erasure and arrives after it is dropped
    await publish(memory_broker, event.model_dump(mode="json"), Subjects.CHAT_TURN_COMPLETED)
    assert await signals(db_pool, tenant_id, "stu") == 0


async def test_expired_sessions_lose_their_turn_signals(
    memory_broker: NatsBroker, db_pool: Any, tenant_id: str
) -> None:
    old, recent = turn(tenant_id, "stu"), turn(tenant_id, "stu")
    for event in (old, recent):
        await publish(memory_broker, event.model_dump(mode="json"), Subjects.CHAT_TURN_COMPLETED)
    assert await signals(db_pool, tenant_id, "stu") == 2
    expired = ChatSessionsExpired(
        tenant_id=tenant_id, session_ids=[old.session_id], retention_days=30
    )
    await publish(memory_broker, expired.model_dump(mode="json"), Subjects.CHAT_SESSIONS_EXPIRED)
    assert await signals(db_pool, tenant_id, "stu") == 1


async def flags(pool: Any, tenant_id: str) -> int:
    count: int = await pool.fetchval(
        "SELECT count(*) FROM memory_flags WHERE tenant_id = $1", tenant_id
    )
    return count


async def test_flags_are_recorded_once_and_go_with_their_session_or_flagger(
    memory_broker: NatsBroker, db_pool: Any, tenant_id: str
) -> None:
    """A flag is recorded once however often it is delivered; it goes when its session
    expires, and an erased flagger's flag that arrives late is dropped."""
    expiring, kept = turn(tenant_id, "stu"), turn(tenant_id, "stu")
    for event in (expiring, kept):
        flag = FeedbackFlagged(
            tenant_id=tenant_id, flag_id=uuid.uuid4(), message_id=event.assistant_message_id,
            session_id=event.session_id, user_id="stu", reason="incorrect",
        )  # fmt: skip
        for _ in range(2):  # a re-delivery
            await publish(memory_broker, flag.model_dump(mode="json"), Subjects.FEEDBACK_FLAGGED)
    assert await flags(db_pool, tenant_id) == 2
    expired = ChatSessionsExpired(
        tenant_id=tenant_id, session_ids=[expiring.session_id], retention_days=30
    )
    await publish(memory_broker, expired.model_dump(mode="json"), Subjects.CHAT_SESSIONS_EXPIRED)
    assert await flags(db_pool, tenant_id) == 1
    erased = UserErased(tenant_id=tenant_id, user_id="stu")
    await publish(memory_broker, erased.model_dump(mode="json"), Subjects.USERS_ERASED)
    assert await flags(db_pool, tenant_id) == 0
    # the erased flagger's flag, delivered again after the erasure: dropped
    await publish(memory_broker, flag.model_dump(mode="json"), Subjects.FEEDBACK_FLAGGED)
    assert await flags(db_pool, tenant_id) == 0


async def test_recall_answers_a_typed_request(memory_broker: NatsBroker, tenant_id: str) -> None:
    request = MemoryRecallRequest(tenant_id=tenant_id, user_id="stu", query="ionic bonds")
    raw = await memory_broker.request(
        request.model_dump(mode="json"), Subjects.MEMORY_RECALL, timeout=30
    )
    reply = MemoryRecallReply.model_validate_json(raw.body)
    assert (reply.request_id, reply.error, reply.memories) == (request.request_id, None, [])
    raw = await memory_broker.request(
        {"tenant_id": tenant_id, "k": 0}, Subjects.MEMORY_RECALL, timeout=30
    )
    assert MemoryRecallReply.model_validate_json(raw.body).error == "bad_input"


@pytest.mark.parametrize(
    "subject", [Subjects.CHAT_TURN_COMPLETED, Subjects.CHAT_SESSION_ENDED, Subjects.USERS_ERASED,
                Subjects.QUIZ_ATTEMPTED, Subjects.CHAT_SESSIONS_EXPIRED,
                Subjects.FEEDBACK_FLAGGED],
)  # fmt: skip
async def test_an_invalid_event_is_parked(
    memory_broker: NatsBroker, tenant_id: str, subject: str
) -> None:
    parked: asyncio.Queue[MessageParked] = asyncio.Queue()

    @memory_broker.subscriber(Subjects.DEAD_LETTER, stream=stream_for(Subjects.DEAD_LETTER))
    async def on_parked(event: MessageParked) -> None:
        await parked.put(event)

    await memory_broker.start()
    await publish(memory_broker, {"tenant_id": tenant_id, "user_id": 7}, subject)
    event = await asyncio.wait_for(parked.get(), 5)
    assert (event.original_subject, event.reason) == (subject, "invalid_message")
    assert (event.tenant_id, event.service) == (tenant_id, "lectern-memory")


async def remember(pool: Any, tenant_id: str, user_id: str, kind: str, topic: str) -> uuid.UUID:
    memory_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding, "
        "evidence) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)",
        memory_id, tenant_id, user_id, kind, f"Found {topic} hard", topic,
        np.ones(LOCAL_EMBEDDING_DIM, dtype=np.float32),
        [{"kind": "said", "detail": "lost", "at": ""}],
    )  # fmt: skip
    return memory_id


async def ask(broker: NatsBroker, request: Request, reply_type: type[R]) -> R:
    raw = await broker.request(request.model_dump(mode="json"), request.subject, timeout=30)
    reply = reply_type.model_validate_json(raw.body)
    assert reply.error is None and reply.request_id == request.request_id, reply
    return reply


async def test_the_gateways_requests_list_count_export_and_forget(
    memory_broker: NatsBroker, db_pool: Any, tenant_id: str
) -> None:
    ana = await remember(db_pool, tenant_id, "ana", "struggle", "meiosis")
    await remember(db_pool, tenant_id, "ben", "struggle", "meiosis")
    await remember(db_pool, tenant_id, "ben", "mastered", "osmosis")
    listed = await ask(
        memory_broker,
        MemoryListRequest(tenant_id=tenant_id, user_id="ben", kinds=["mastered"]),
        MemoryListReply,
    )
    assert [(m.kind, m.topic) for m in listed.memories] == [("mastered", "osmosis")]
    counted = await ask(
        memory_broker,
        MemoryTopicsRequest(tenant_id=tenant_id, user_ids=["ana", "ben", "cho"], min_users=2),
        MemoryTopicsReply,
    )
    assert [(t.topic, t.users, t.evidence) for t in counted.topics] == [("meiosis", 2, 2)]
    exported = await ask(
        memory_broker, MemoryExportRequest(tenant_id=tenant_id, user_id="ana"), MemoryExportReply
    )
    assert [m["id"] for m in exported.memories] == [str(ana)]
    assert "embedding" not in exported.memories[0] and exported.holds_anything()
    forget_one = MemoryForgetRequest(tenant_id=tenant_id, user_id="ben", memory_id=ana)
    assert (await ask(memory_broker, forget_one, MemoryForgetReply)).deleted == 0  # not ben's
    forget_all = MemoryForgetRequest(tenant_id=tenant_id, user_id="ana")
    assert (await ask(memory_broker, forget_all, MemoryForgetReply)).deleted == 1
    exported = await ask(
        memory_broker, MemoryExportRequest(tenant_id=tenant_id, user_id="ana"), MemoryExportReply
    )
    assert not exported.holds_anything()
