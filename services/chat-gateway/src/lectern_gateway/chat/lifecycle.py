"""A session as its caller may read it; sessions ending, on request and by the idle sweeper,
each writing ``chat.session.ended`` to the outbox in the transaction that ends it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from lectern_common.db.types import Connection, Pool
from lectern_common.events import ChatSessionEnded
from lectern_common.outbox import enqueue
from lectern_gateway.auth import Principal
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.turn_input import PendingCheck
from lectern_gateway.problems import ProblemError

log = logging.getLogger(__name__)


async def session_for(*, pool: Pool, principal: Principal, session_id: uuid.UUID) -> dict[str, Any]:
    """A session the caller may read (own for students; the tenant's for staff), else 404."""
    row = await repo.get_session(pool=pool, tenant_id=principal.tenant_id, session_id=session_id)
    if row is None or (not principal.is_staff and row["user_id"] != principal.user_id):
        raise ProblemError(404, "Not found", f"no session {session_id}")
    return row


async def end_session(*, pool: Pool, tenant_id: str, session_id: uuid.UUID, reason: str) -> bool:
    """End an active session, with ``chat.session.ended`` in the same transaction (the
    outbox); False if it was not active."""
    async with pool.acquire() as conn, conn.transaction():
        row = await repo.end_session(
            pool=conn, tenant_id=tenant_id, session_id=session_id, reason=reason
        )
        if row is None:
            return False
        await _skip_open_check(conn, row)
        await enqueue(conn, _ended(row, reason))
    return True


async def _skip_open_check(conn: Connection, row: dict[str, Any]) -> None:
    """A check question left unanswered when the session ends counts as skipped."""
    from lectern_gateway.chat import tutoring  # the tutor's rules; imported late (cycle)

    last = await repo.last_message(pool=conn, tenant_id=row["tenant_id"], session_id=row["id"])
    pending = (
        None if last is None
        else PendingCheck.of_message(last["id"], last["role"], last["tutor_check"])
    )  # fmt: skip
    if pending is not None:
        await tutoring.settle_skipped(
            conn,
            tenant_id=row["tenant_id"],
            user_id=row["user_id"],
            pending=pending,
            session_id=row["id"],
        )


def _ended(row: dict[str, Any], reason: str) -> ChatSessionEnded:
    return ChatSessionEnded(
        tenant_id=row["tenant_id"],
        session_id=row["id"],
        user_id=row["user_id"],
        reason="idle" if reason == "idle" else "explicit",
        message_count=int(row["n"]),
        flagged_messages=int(row["flagged"]),
    )


async def sweep_idle_sessions(*, pool: Pool, idle_s: float) -> int:
    """End every session idle longer than ``idle_s``; returns how many this replica ended."""
    total = 0
    while True:
        async with pool.acquire() as conn, conn.transaction():
            rows = await repo.claim_idle_sessions(pool=conn, idle_s=idle_s)
            for row in rows:
                await _skip_open_check(conn, row)
                await enqueue(conn, _ended(row, "idle"))
        total += len(rows)
        if len(rows) < 100:
            return total


async def idle_sweeper(
    *, pool: Pool, idle_s: float, every_s: float, turn_retention_s: float = 86400.0
) -> None:
    """Run the idle sweep forever (cancel to stop); it also forgets the kept events of turns
    older than ``turn_retention_s`` (their answers stay in the messages)."""
    while True:
        try:
            ended = await sweep_idle_sessions(pool=pool, idle_s=idle_s)
            if ended:
                log.info("idle sweep ended %d sessions", ended)
            await repo.delete_old_turns(pool=pool, older_than_s=float(turn_retention_s))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("idle sweep failed")
        await asyncio.sleep(every_s)
