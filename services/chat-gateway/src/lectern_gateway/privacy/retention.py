"""Session retention: a tenant that sets ``session_retention_days`` (``PUT
/v1/tenant/settings``; unset by default: kept) has every session idle longer than that deleted
by a periodic sweep, with its messages, tutor checks, kept turn events, the flags on its
answers, its knowledge gaps and notices; ``chat.sessions.expired``, written to the outbox in
the same transaction, has the memory service delete its copies of their turns (it owns
them). The quality dashboard's gap topics of days past the retention go too. Long-term memories stay
(a student forgets them with ``DELETE /v1/me/memories``), and so do quiz attempts, which
belong to no session.

Any number of gateway replicas sweep at once: sessions are claimed ``FOR UPDATE SKIP
LOCKED`` in batches, each deleted in its own transaction."""

from __future__ import annotations

import asyncio
import logging

from lectern_common.db.types import Pool
from lectern_common.events import ChatSessionsExpired
from lectern_common.outbox import enqueue
from lectern_gateway.privacy import repository as repo

log = logging.getLogger(__name__)

BATCH = 200


async def sweep_expired_sessions(*, pool: Pool, batch: int = BATCH) -> int:
    """Delete the sessions past their tenant's retention; returns how many."""
    total = 0
    for tenant_id, days in await repo.retention_settings(pool):
        while True:
            async with pool.acquire() as conn, conn.transaction():
                expired = await repo.expire_sessions(
                    conn, tenant_id=tenant_id, days=days, limit=batch
                )
                if expired:
                    await enqueue(conn, ChatSessionsExpired(
                        tenant_id=tenant_id, session_ids=expired, retention_days=days))  # fmt: skip
            total += len(expired)
            if len(expired) < batch:
                break
        async with pool.acquire() as conn:
            await repo.expire_gap_topics(conn, tenant_id=tenant_id, days=days)
    return total


async def retention_sweeper(*, pool: Pool, every_s: float) -> None:
    """Sweep now and every ``every_s`` seconds, for ever (cancel to stop)."""
    while True:
        try:
            deleted = await sweep_expired_sessions(pool=pool)
            if deleted:
                log.info("retention sweep deleted %d sessions", deleted)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("retention sweep failed; retrying next interval")
        await asyncio.sleep(every_s)
