"""The memory service's erasure (``users.erased``) against the real Postgres: every row of the
user goes, a re-delivery changes nothing, another user is untouched, and an event about the
user that occurred before the erasure is dropped however late it arrives."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM

from lectern_common.events import ChatTurnCompleted, Subjects, UserErased, erased_user_key
from lectern_memory import erasure
from lectern_memory.handlers import handle_user_erased

pytestmark = pytest.mark.integration

TABLES = ("user_memories", "memory_turn_signals", "memory_distillations", "memory_quiz_topics",
          "memory_flags", "memory_check_runs")  # fmt: skip


async def _remember(pool: Any, tenant_id: str, user_id: str) -> None:
    """One row of the user in each of the memory service's tables, and a pending event."""
    session_id = uuid.uuid4()
    vector = np.random.default_rng(3).standard_normal(LOCAL_EMBEDDING_DIM).astype(np.float32)
    await pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding) "
        "VALUES ($1, $2, $3, 'struggle', 'Found osmosis hard', 'osmosis', $4)",
        uuid.uuid4(), tenant_id, user_id, vector,
    )  # fmt: skip
    await pool.execute(
        "INSERT INTO memory_turn_signals (assistant_message_id, session_id, tenant_id, user_id, "
        "question, answer, band, confidence, occurred_at) "
        "VALUES ($1, $2, $3, $4, 'what is osmosis', 'water moves', 'low', 0.5, now())",
        uuid.uuid4(), session_id, tenant_id, user_id,
    )  # fmt: skip
    await pool.execute(
        "INSERT INTO memory_distillations (session_id, tenant_id, user_id) VALUES ($1, $2, $3)",
        session_id, tenant_id, user_id,
    )  # fmt: skip
    # a flag the user made, and a teacher's flag on the user's session
    for flagger in (user_id, f"teacher-of-{user_id}"):
        await pool.execute(
            "INSERT INTO memory_flags (flag_id, tenant_id, message_id, session_id, user_id, "
            "flagged_at) VALUES ($1, $2, $3, $4, $5, now())",
            uuid.uuid4(), tenant_id, uuid.uuid4(), session_id, flagger,
        )  # fmt: skip
    await pool.execute(
        "INSERT INTO memory_quiz_topics (tenant_id, user_id, topic, wrong_total) "
        "VALUES ($1, $2, 'osmosis', 1)",
        tenant_id, user_id,
    )  # fmt: skip
    await pool.execute(
        "INSERT INTO memory_check_runs (tenant_id, user_id, unit, session_id, session_right) "
        "VALUES ($1, $2, 'w:osmosis', $3, true)",
        tenant_id, user_id, session_id,
    )  # fmt: skip
    await pool.execute(
        "INSERT INTO outbox (id, subject, payload) VALUES ($1, $2, $3)",
        uuid.uuid4(), Subjects.MEMORY_DISTILLED,
        {"tenant_id": tenant_id, "user_id": user_id, "session_id": str(session_id)},
    )  # fmt: skip


async def _rows(pool: Any, tenant_id: str, user_id: str) -> dict[str, int]:
    counts = {
        table: await pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND user_id = $2",  # noqa: S608
            tenant_id,
            user_id,
        )
        for table in TABLES
    }
    counts["outbox"] = await pool.fetchval(
        "SELECT count(*) FROM outbox WHERE payload->>'tenant_id' = $1 AND payload->>'user_id' = $2",
        tenant_id,
        user_id,
    )
    return counts


async def test_erasure_deletes_every_row_once_and_spares_others(
    db_pool: Any, tenant_id: str
) -> None:
    for user in ("maya", "leo"):
        await _remember(db_pool, tenant_id, user)
    event = UserErased(tenant_id=tenant_id, user_id="maya")
    await handle_user_erased(db_pool, event, None)
    assert await _rows(db_pool, tenant_id, "maya") == dict.fromkeys((*TABLES, "outbox"), 0)
    assert await _rows(db_pool, tenant_id, "leo") == dict.fromkeys((*TABLES, "outbox"), 1)
    # the teacher's flag on maya's session went with it, not the one on leo's
    assert await _rows(db_pool, tenant_id, "teacher-of-maya") == dict.fromkeys(
        (*TABLES, "outbox"), 0
    )
    assert (await _rows(db_pool, tenant_id, "teacher-of-leo"))["memory_flags"] == 1
    # a re-delivery deletes nothing more; an older erasure does not move the record back
    assert set((await erasure.erase_user(db_pool, event)).values()) == {0}
    older = UserErased(
        tenant_id=tenant_id, user_id="maya", occurred_at=event.occurred_at - timedelta(days=1)
    )
    await erasure.erase_user(db_pool, older)
    recorded = await db_pool.fetchrow(
        "SELECT erased_at, event_id FROM memory_erasures WHERE tenant_id = $1 AND user_key = $2",
        tenant_id,
        erased_user_key(tenant_id, "maya"),
    )
    assert (recorded["erased_at"], recorded["event_id"]) == (event.occurred_at, event.event_id)
    # the record does not name the user
    assert not await db_pool.fetchval(
        "SELECT count(*) FROM memory_erasures e WHERE strpos(e::text, 'maya') > 0"
    )


async def test_events_that_occurred_before_the_erasure_are_dropped(
    db_pool: Any, tenant_id: str
) -> None:
    event = UserErased(tenant_id=tenant_id, user_id="maya")
    await erasure.erase_user(db_pool, event)
    turn = ChatTurnCompleted(
        tenant_id=tenant_id, session_id=uuid.uuid4(), user_id="maya",
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(), question="q",
        answer="a", confidence=0.5, band="low", occurred_at=event.occurred_at,
    )  # fmt: skip
    handled: list[str] = []

    async def handle() -> None:
        handled.append("maya")

    await erasure.unless_erased(db_pool, turn, handle)
    assert handled == []
    # the same user after the erasure (a returning student) is handled as anyone
    later = turn.model_copy(update={"occurred_at": event.occurred_at + timedelta(seconds=1)})
    await erasure.unless_erased(db_pool, later, handle)
    assert handled == ["maya"]


async def test_rows_written_while_the_erasure_commits_are_erased_again(
    db_pool: Any, tenant_id: str
) -> None:
    turn = ChatTurnCompleted(
        tenant_id=tenant_id, session_id=uuid.uuid4(), user_id="maya",
        user_message_id=uuid.uuid4(), assistant_message_id=uuid.uuid4(), question="q",
        answer="a", confidence=0.5, band="low",
    )  # fmt: skip

    async def handle_while_erased() -> None:
        # the handler writes, and the erasure (of a later moment) commits meanwhile
        await _remember(db_pool, tenant_id, "maya")
        later = turn.occurred_at + timedelta(seconds=1)
        await erasure.erase_user(
            db_pool, UserErased(tenant_id=tenant_id, user_id="nobody", occurred_at=later)
        )
        await db_pool.execute(
            "INSERT INTO memory_erasures (tenant_id, user_key, erased_at, event_id) "
            "VALUES ($1, $2, $3, $4)",
            tenant_id, erased_user_key(tenant_id, "maya"), later, uuid.uuid4(),
        )  # fmt: skip

    await erasure.unless_erased(db_pool, turn, handle_while_erased)
    assert await _rows(db_pool, tenant_id, "maya") == dict.fromkeys((*TABLES, "outbox"), 0)
