"""Erasure of what the memory service keeps about a user, on ``users.erased``.

The memory service owns ``user_memories``, ``memory_turn_signals``, ``memory_distillations``,
the quiz tallies (``memory_quiz_topics``) and its record of flags (``memory_flags``): on
``users.erased`` it deletes the user's rows of each (the flags the user made, and any made on
the user's sessions, as the gateway's erasure deletes those sessions' messages and their
flags), and the ``memory.distilled`` events about them still in the outbox, in one
transaction under the lock its memory merges take, so no distillation interleaves. A
re-delivered event finds nothing left and changes nothing.

``users.erased`` travels on its own stream, so an event about the user from another stream
(``chat.turn.completed``, ``chat.session.ended``, ``quiz.attempted``, ``feedback.flagged``)
may arrive after it. The erasure is recorded (``memory_erasures``, memory's own, keyed by a
hash of tenant and user), and an event that occurred before it is dropped
(``unless_erased``); one being handled while the erasure commits has what it wrote erased
again at once. ``memory_quiz_attempts`` (an attempt id and
a time, the consumer's idempotency keys) names no user and is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from lectern_common.db.types import Connection, Pool
from lectern_common.events import (
    ChatSessionEnded,
    ChatTurnCompleted,
    FeedbackFlagged,
    QuizAttempted,
    Subjects,
    UserErased,
    erased_user_key,
)
from lectern_memory import repository as repo

log = logging.getLogger(__name__)

#: the memory service's tables of per-user rows
TABLES = (
    "user_memories", "memory_turn_signals", "memory_distillations", "memory_quiz_topics",
    "memory_check_runs",
)  # fmt: skip


#: the events about a user that memory consumes (each names its tenant, user and moment)
AboutUser = ChatTurnCompleted | ChatSessionEnded | QuizAttempted | FeedbackFlagged

#: the user's flags and the flags on the user's sessions (found before their turns go)
_ERASE_FLAGS = """
    DELETE FROM memory_flags WHERE tenant_id = $1 AND (user_id = $2 OR session_id IN (
        SELECT session_id FROM memory_turn_signals WHERE tenant_id = $1 AND user_id = $2
        UNION SELECT session_id FROM memory_distillations WHERE tenant_id = $1 AND user_id = $2))"""


async def erase_user(pool: Pool, event: UserErased) -> dict[str, int]:
    """Delete every row the memory service keeps about the event's user and record the
    erasure; rows deleted per table (all zero on a re-delivery)."""
    async with pool.acquire() as conn, conn.transaction():
        erased = await _erase_rows(conn, tenant_id=event.tenant_id, user_id=event.user_id)
        await conn.execute(
            "INSERT INTO memory_erasures (tenant_id, user_key, erased_at, event_id) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, user_key) DO "
            "UPDATE SET erased_at = EXCLUDED.erased_at, event_id = EXCLUDED.event_id "
            "WHERE memory_erasures.erased_at < EXCLUDED.erased_at",
            event.tenant_id, erased_user_key(event.tenant_id, event.user_id),
            event.occurred_at, event.event_id,
        )  # fmt: skip
    return erased


async def _erase_rows(conn: Connection, *, tenant_id: str, user_id: str) -> dict[str, int]:
    await repo.lock_user(conn, tenant_id=tenant_id, user_id=user_id)
    status: str = await conn.execute(_ERASE_FLAGS, tenant_id, user_id)
    erased: dict[str, int] = {"memory_flags": int(status.split()[-1])}
    for table in TABLES:
        status = await conn.execute(
            f"DELETE FROM {table} WHERE tenant_id = $1 AND user_id = $2",  # noqa: S608
            tenant_id,
            user_id,
        )
        erased[table] = int(status.split()[-1])
    status = await conn.execute(
        "DELETE FROM outbox WHERE subject = $3 AND payload->>'tenant_id' = $1 "
        "AND payload->>'user_id' = $2",
        tenant_id,
        user_id,
        Subjects.MEMORY_DISTILLED,
    )
    erased["outbox"] = int(status.split()[-1])
    return erased


async def erased_since(pool: Pool, event: AboutUser) -> bool:
    """Whether the user the event is about was erased after it occurred."""
    erased_at: datetime | None = await pool.fetchval(
        "SELECT erased_at FROM memory_erasures WHERE tenant_id = $1 AND user_key = $2",
        event.tenant_id,
        erased_user_key(event.tenant_id, event.user_id),
    )
    return erased_at is not None and event.occurred_at <= erased_at


async def unless_erased(
    pool: Pool, event: AboutUser, handle: Callable[[], Awaitable[None]]
) -> None:
    """Handle an event about a user unless the user was erased after it occurred; when the
    erasure committed while it was being handled, erase what the handling wrote."""
    if await erased_since(pool, event):
        log.info("dropped an event about an erased user (it occurred before the erasure)")
        return
    await handle()
    if await erased_since(pool, event):
        async with pool.acquire() as conn, conn.transaction():
            await _erase_rows(conn, tenant_id=event.tenant_id, user_id=event.user_id)
        log.info("erased again what an event about an erased user wrote meanwhile")
