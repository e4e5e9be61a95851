"""A student's data is theirs: export and erasure through the real gateway and the real memory
service (retriever and re-ranker stand-ins, offline answerer), and session retention.

A student chats with the tutor (a check question answered), meets a knowledge gap, flags an
answer, takes a quiz, is on a class roster and has memories; the export holds all of it.
After ``DELETE /v1/users/{user}`` and the memory service consuming ``users.erased`` (once),
no row of any table holds the student's id or a word only they typed, another student's
data is untouched, the export is empty, and a stale event about the student cannot bring
anything back."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    STUDY_MATERIAL,
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_common.events import ChatTurnCompleted, Subjects
from lectern_memory.app import create_app as create_memory
from lectern_memory.config import Settings as MemorySettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MEMORY_TABLES = ("user_memories", "memory_turn_signals", "memory_distillations",
                 "memory_quiz_topics", "memory_flags")  # fmt: skip


@pytest.fixture(scope="module")
async def stack(
    nats_url: str, database_url: str, db_pool: Any
) -> AsyncIterator[tuple[Gateway, Responders]]:
    """The gateway and its worker (retention swept every 0.3 s), the real memory service, and
    retriever and re-ranker stand-ins."""
    memory = create_memory(
        MemorySettings(nats_url=nats_url, database_url=database_url, http_port=0, log_json=False)
    )
    responders = Responders(pool=db_pool)
    settings = gateway_settings(
        nats_url, database_url, memory_timeout_s=5.0, retention_sweep_interval_s=0.3
    )
    async with (
        memory.router.lifespan_context(memory),
        run_responders(nats_url, responders),
        serve_gateway(settings, worker=True) as gateway,
    ):
        yield gateway, responders


@pytest.fixture
async def client(stack: tuple[Gateway, Responders]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack[0].url, timeout=60) as c:
        yield c


async def until(check: Any, what: str, timeout: float = 30.0) -> Any:
    """Poll ``check()`` until it returns something truthy."""
    for _ in range(int(timeout / 0.1)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


async def user_tables(pool: Any) -> list[str]:
    """Every table with a user_id column."""
    rows = await pool.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
        "AND column_name = 'user_id' ORDER BY table_name"
    )
    return [r["table_name"] for r in rows]


async def rows_of(pool: Any, tenant_id: str, user_id: str) -> dict[str, int]:
    """How many rows of each table with a user_id column are the user's."""
    return {
        table: await pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND user_id = $2",  # noqa: S608
            tenant_id,
            user_id,
        )
        for table in await user_tables(pool)
    }


async def rows_holding(pool: Any, text: str, *, except_outbox: uuid.UUID) -> dict[str, int]:
    """Rows of every table whose text (every column) holds ``text``; the outbox row
    ``except_outbox`` (the erasure's own event) is left out."""
    tables = await pool.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
        "AND table_type = 'BASE TABLE' ORDER BY table_name"
    )
    found: dict[str, int] = {}
    for row in tables:
        table = row["table_name"]
        n = await pool.fetchval(
            f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, $1) > 0 '  # noqa: S608
            + ("AND t.id <> $2" if table == "outbox" else "AND $2::uuid IS NOT NULL"),
            text,
            except_outbox,
        )
        if n:
            found[table] = n
    return found


async def test_export_holds_everything_and_erasure_leaves_nothing(
    stack: tuple[Gateway, Responders],
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    jetstream: Any,
) -> None:
    gateway, responders = stack
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    student, other = f"stu-{uuid.uuid4().hex[:10]}", f"oth-{uuid.uuid4().hex[:10]}"
    marker, other_marker = f"zorblaxine{uuid.uuid4().hex[:8]}", f"quibbleton{uuid.uuid4().hex[:8]}"
    me = gateway.token(tenant_id, student)
    them = gateway.token(tenant_id, other)
    admin = gateway.token(tenant_id, "admin-1", role="admin")
    teacher = gateway.token(tenant_id, "teacher-1", role="teacher")

    # the student: a tutor session with a check answered, a knowledge gap, a flag
    tutor = await new_session(client, gateway, me, mode="tutor")
    first = await ask(client, gateway, tutor["id"], "What is mitosis?", me)
    (asked,) = first.of("check")
    check = await db_pool.fetchval(
        "SELECT tutor_check FROM chat_messages WHERE id = $1", first.done.message_id
    )
    judged = await ask(client, gateway, tutor["id"], check["answer"], me)
    assert judged.of("check")[0].verdict == "right"
    responders.band = "gap"
    try:
        gap = await ask(client, gateway, tutor["id"], f"Why do {marker} crystals glow?", me)
    finally:
        responders.band = "high"
    assert gap.done.knowledge_gap
    flagged = await client.post(
        f"/v1/messages/{first.done.message_id}/flags", headers=me,
        json={"reason": "unclear", "details": f"what does {marker} mean here"},
    )  # fmt: skip
    assert flagged.status_code == 201, flagged.text
    assert (await client.post(f"/v1/sessions/{tutor['id']}/end", headers=me)).status_code == 200
    # a quiz, answered wrongly in the student's own words; a class roster
    quiz = await client.post("/v1/quizzes", headers=me, json={"num_questions": 2})
    assert quiz.status_code == 201, quiz.text
    answers = {q["id"]: f"{marker} answer" for q in quiz.json()["questions"]}
    attempt = await client.post(
        f"/v1/quizzes/{quiz.json()['id']}/attempts", headers=me, json={"answers": answers}
    )
    assert attempt.status_code == 201, attempt.text
    rostered = await client.put(f"/v1/classes/9b/students/{student}", headers=teacher)
    assert rostered.status_code in (200, 201), rostered.text

    # another student of the tenant
    theirs = await new_session(client, gateway, them)
    answer = await ask(client, gateway, theirs["id"], f"What is meiosis, {other_marker}?", them)
    assert answer.done.message_id
    await client.post(
        f"/v1/messages/{answer.done.message_id}/flags", headers=them,
        json={"reason": "other", "details": f"{other_marker} flagged"},
    )  # fmt: skip
    assert (await client.post(f"/v1/sessions/{theirs['id']}/end", headers=them)).is_success

    # the memory service has distilled both sessions and tallied the quiz
    async def memory_done() -> bool:
        mine = await rows_of(db_pool, tenant_id, student)
        others = await rows_of(db_pool, tenant_id, other)
        return all(mine[t] for t in MEMORY_TABLES) and bool(others["memory_distillations"])

    await until(memory_done, "memory recorded the turns, the sessions and the quiz")

    # the export holds all of it
    exported = await client.get("/v1/me/export", headers=me)
    assert exported.status_code == 200, exported.text
    data = exported.json()
    assert (data["format"], data["tenant_id"], data["user_id"]) == (
        "lectern.user-export.v1", tenant_id, student,
    )  # fmt: skip
    (session,) = data["sessions"]
    messages = session["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert messages[4]["content"] == f"Why do {marker} crystals glow?"
    assert messages[1]["citations"] and messages[1]["tutor_check"]["prompt"] == asked.question
    assert messages[1]["tutor_check"]["status"] == "judged"
    assert messages[1]["tutor_check"]["verdict"] == "right"
    assert [g["question"] for g in data["knowledge_gaps"]] == [f"Why do {marker} crystals glow?"]
    assert [f["details"] for f in data["feedback_flags"]] == [f"what does {marker} mean here"]
    assert [q["id"] for q in data["quizzes"]] == [quiz.json()["id"]]
    (taken,) = data["quiz_attempts"]
    assert taken["answers"] == answers and taken["quiz_title"] == quiz.json()["title"]
    assert data["memories"] and all("embedding" not in m for m in data["memories"])
    assert data["quiz_tallies"] and data["distillations"]
    assert {s["assistant_message_id"] for s in data["turn_signals"]} == {
        str(m["id"]) for m in messages if m["role"] == "assistant"
    }
    assert [c["class_id"] for c in data["classes"]] == ["9b"]
    assert sum(u["messages"] for u in data["usage"]) == 3
    text = json.dumps(data)
    assert other not in text and other_marker not in text
    # an admin exports the same; a student exports and erases nobody else; a teacher neither
    by_admin = (await client.get(f"/v1/users/{student}/export", headers=admin)).json()
    assert {**by_admin, "exported_at": None} == {**data, "exported_at": None}
    for url in (f"/v1/users/{other}/export", f"/v1/users/{student}/export"):
        denied = await client.get(url, headers=them)
        assert denied.status_code == 403
        assert denied.headers["content-type"].startswith("application/problem+json")
    for headers in (them, me, teacher):
        assert (await client.delete(f"/v1/users/{student}", headers=headers)).status_code == 403
    before = await rows_of(db_pool, tenant_id, other)
    assert before["chat_messages"] == 2 and before["feedback_flags"] == 1

    # erased: the gateway's rows at once, the memory service's when it consumes users.erased
    erased = await client.delete(f"/v1/users/{student}", headers=admin)
    assert erased.status_code == 202, erased.text
    body = erased.json()
    assert body["erased"]["chat_sessions"] == 1 and body["erased"]["chat_messages"] == 6
    assert body["erased"]["feedback_flags"] == 1 and body["erased"]["knowledge_gaps"] == 1
    assert body["erased"]["quality_gap_topics"] == 1 and body["erased"]["quizzes"] == 1
    assert body["memory_pending"] and not body["already_erased"]

    async def memory_erased() -> bool:
        left = await rows_of(db_pool, tenant_id, student)
        return not any(left.values())

    await until(memory_erased, "the memory service erased the student's rows")
    (event,) = await published(jetstream, Subjects.USERS_ERASED, tenant_id)
    assert (event["user_id"], event["event_id"]) == (student, body["event_id"])
    # no row anywhere holds the student's words or id: only the erasure's own event names them
    erasure_id = uuid.UUID(body["event_id"])
    assert await rows_holding(db_pool, marker, except_outbox=erasure_id) == {}
    assert await rows_holding(db_pool, student, except_outbox=erasure_id) == {}
    assert await rows_of(db_pool, tenant_id, other) == before
    # the export is empty now
    for url, headers in (("/v1/me/export", me), (f"/v1/users/{student}/export", admin)):
        after = (await client.get(url, headers=headers)).json()
        assert not any(v for k, v in after.items() if isinstance(v, list)), after

    # a repeated DELETE answers with the same erasure and publishes nothing; unknown: 404
    again = await client.delete(f"/v1/users/{student}", headers=admin)
    assert again.status_code == 200 and again.json()["already_erased"]
    assert again.json()["event_id"] == body["event_id"]
    unknown = await client.delete("/v1/users/nobody-at-all", headers=admin)
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")

    # an event about the student that occurred before the erasure and arrives after it
    # (still in its stream) brings nothing back; the other student's next turn is recorded
    stale = ChatTurnCompleted(
        tenant_id=tenant_id, session_id=uuid.UUID(tutor["id"]), user_id=student,
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(),
        question=f"{marker} once more", answer="late", confidence=0.9, band="high",
        occurred_at=erased.json()["erased_at"],
    )  # fmt: skip
    fresh = stale.model_copy(
        update={"user_id": other, "assistant_message_id": uuid.uuid4(), "event_id": uuid.uuid4(),
                "occurred_at": stale.occurred_at + timedelta(seconds=1)}
    )  # fmt: skip
    for late in (stale, fresh):
        await jetstream.publish(late.subject, late.model_dump_json().encode())

    async def fresh_recorded() -> bool:
        return bool(await db_pool.fetchval(
            "SELECT count(*) FROM memory_turn_signals WHERE assistant_message_id = $1",
            fresh.assistant_message_id,
        ))  # fmt: skip

    await until(fresh_recorded, "the other student's turn was recorded")
    await asyncio.sleep(1.0)  # the stale one was handled before it, or just after
    assert not any((await rows_of(db_pool, tenant_id, student)).values())
    assert len(await published(jetstream, Subjects.USERS_ERASED, tenant_id)) == 1


async def test_sessions_past_the_tenants_retention_are_deleted(
    stack: tuple[Gateway, Responders],
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
) -> None:
    gateway, responders = stack
    await seed_document(db_pool, tenant_id=tenant_id, chunks=STUDY_MATERIAL)
    student = gateway.token(tenant_id, "stu-1")
    admin = gateway.token(tenant_id, "admin-1", role="admin")
    url = "/v1/tenant/settings"
    shown = (await client.get(url, headers=admin)).json()
    assert shown["session_retention_days"] is None  # off by default
    assert (await client.put(url, headers=student, json={"session_retention_days": 30})
            ).status_code == 403  # fmt: skip
    assert (await client.put(url, headers=admin, json={"session_retention_days": 0})
            ).status_code == 422  # fmt: skip

    # an old session (a check asked, a flag, a gap) and a recent one
    old = await new_session(client, gateway, student, mode="tutor")
    asked = await ask(client, gateway, old["id"], "What is mitosis?", student)
    assert asked.of("check")
    flag = await client.post(f"/v1/messages/{asked.done.message_id}/flags", headers=student,
                             json={"reason": "unclear"})  # fmt: skip
    assert flag.status_code == 201
    responders.band = "gap"
    try:
        await ask(client, gateway, old["id"], "Why do volcanoes erupt?", student)
    finally:
        responders.band = "high"
    assert (await client.post(f"/v1/sessions/{old['id']}/end", headers=student)).is_success
    recent = await new_session(client, gateway, student)
    await ask(client, gateway, recent["id"], "What is meiosis?", student)

    async def distilled() -> int:
        count: int = await db_pool.fetchval(
            "SELECT count(*) FROM memory_distillations WHERE session_id = $1",
            uuid.UUID(old["id"]),
        )
        return count

    await until(distilled, "memory distilled the old session")
    assert await db_pool.fetchval(
        "SELECT count(*) FROM memory_turn_signals WHERE session_id = $1", uuid.UUID(old["id"])
    ) == 2  # fmt: skip
    memories = await db_pool.fetchval(
        "SELECT count(*) FROM user_memories WHERE tenant_id = $1", tenant_id
    )
    # another tenant keeps everything (no retention set)
    elsewhere = f"{tenant_id}-b"
    await seed_document(db_pool, tenant_id=elsewhere, chunks=STUDY_MATERIAL)
    kept = await new_session(client, gateway, gateway.token(elsewhere, "stu-1"))
    await ask(client, gateway, kept["id"], "What is mitosis?", gateway.token(elsewhere, "stu-1"))
    for session in (old, kept):
        await db_pool.execute(
            "UPDATE chat_sessions SET last_activity_at = now() - interval '40 days', "
            "created_at = now() - interval '40 days' WHERE id = $1",
            uuid.UUID(session["id"]),
        )
    await db_pool.execute(
        "UPDATE quality_gap_topics SET day = day - 40 WHERE tenant_id = $1", tenant_id
    )
    await asyncio.sleep(1.0)  # several sweeps: retention is off so far, nothing goes

    assert await db_pool.fetchval(
        "SELECT count(*) FROM chat_sessions WHERE id = $1", uuid.UUID(old["id"])
    )
    on = await client.put(url, headers=admin, json={"session_retention_days": 30})
    assert on.status_code == 200
    assert on.json()["session_retention_days"] == 30
    assert on.json()["web_search"] is True and on.json()["web_search_set"] is None  # unchanged

    async def old_gone() -> bool:
        n: int = await db_pool.fetchval(
            "SELECT count(*) FROM chat_sessions WHERE id = $1", uuid.UUID(old["id"])
        )
        return n == 0

    await until(old_gone, "the retention sweep deleted the old session", timeout=10)
    old_id = uuid.UUID(old["id"])

    async def signals_gone() -> bool:
        n: int = await db_pool.fetchval(
            "SELECT count(*) FROM memory_turn_signals WHERE session_id = $1", old_id
        )
        return n == 0

    # the memory service deletes its copies of the turns on chat.sessions.expired
    await until(signals_gone, "the memory service deleted the old session's turns", timeout=10)
    for table, column in (
        ("chat_messages", "session_id"), ("chat_turns", "session_id"),
        ("feedback_flags", "session_id"), ("knowledge_gaps", "session_id"),
    ):  # fmt: skip
        left = await db_pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE {column} = $1",  # noqa: S608
            old_id,
        )
        assert left == 0, table
    assert not await db_pool.fetchval(
        "SELECT count(*) FROM quality_gap_topics WHERE tenant_id = $1", tenant_id
    )
    assert await db_pool.fetchval(
        "SELECT count(*) FROM chat_messages WHERE session_id = $1", uuid.UUID(recent["id"])
    ) == 2  # fmt: skip
    assert await db_pool.fetchval(
        "SELECT count(*) FROM chat_messages WHERE session_id = $1", uuid.UUID(kept["id"])
    ) == 2  # fmt: skip
    assert await db_pool.fetchval(
        "SELECT count(*) FROM user_memories WHERE tenant_id = $1", tenant_id
    ) == memories  # fmt: skip
    off = await client.put(url, headers=admin, json={"session_retention_days": None})
    assert off.json()["session_retention_days"] is None


async def test_erasure_deletes_webhook_deliveries_about_the_user(
    db_pool: Any, tenant_id: str
) -> None:
    """Webhook deliveries kept for their log name the user in their payload: erased with the
    user's other rows, sent or not, except the erasure's own event (subscribers need it)."""
    from lectern_gateway.privacy.repository import erase_gateway_rows

    hook = uuid.uuid4()
    await db_pool.execute(
        # disabled: the dispatcher of other tests sharing the database never sends these
        "INSERT INTO webhooks (id, tenant_id, url, event_types, secret, disabled_at) "
        "VALUES ($1, $2, 'https://lms.example/hook', $3, 'whsec_x', now())",
        hook, tenant_id, ["lectern.chat.turn_completed.v1", Subjects.USERS_ERASED],
    )  # fmt: skip

    async def deliver(event_type: str, user: str, status: str) -> uuid.UUID:
        delivery = uuid.uuid4()
        payload = json.dumps({"tenant_id": tenant_id, "user_id": user, "question": "why?"})
        await db_pool.execute(
            "INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, "
            "payload, status) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            delivery, hook, tenant_id, uuid.uuid4(), event_type, payload, status,
        )  # fmt: skip
        await db_pool.execute(
            "INSERT INTO webhook_attempts (delivery_id, status_code, duration_ms) "
            "VALUES ($1, 200, 5)",
            delivery,
        )
        return delivery

    sent = await deliver("lectern.chat.turn_completed.v1", "ivy", "succeeded")
    pending = await deliver("lectern.chat.turn_completed.v1", "ivy", "pending")
    erasure = await deliver(Subjects.USERS_ERASED, "ivy", "pending")
    others = await deliver("lectern.chat.turn_completed.v1", "jon", "succeeded")
    async with db_pool.acquire() as conn, conn.transaction():
        counts = await erase_gateway_rows(conn, tenant_id=tenant_id, user_id="ivy")
    assert counts["webhook_deliveries"] == 2
    left = {r["id"] for r in await db_pool.fetch(
        "SELECT id FROM webhook_deliveries WHERE webhook_id = $1", hook
    )}  # fmt: skip
    assert left == {erasure, others} and not left & {sent, pending}
    assert await db_pool.fetchval(
        "SELECT count(*) FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[])",
        [sent, pending],
    ) == 0  # fmt: skip
