"""Sessions ending: on request, and the idle sweeper; each publishes ``chat.session.ended``."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from faststream.nats import NatsBroker

from lectern_common.events import ChatSessionEnded
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.turn import publish

log = logging.getLogger(__name__)


async def end_session(
    *, pool: Any, broker: NatsBroker, tenant_id: str, session_id: uuid.UUID, reason: str
) -> bool:
    """End an active session and publish ``chat.session.ended``; False if it was not active."""
    row = await repo.end_session(
        pool=pool, tenant_id=tenant_id, session_id=session_id, reason=reason
    )
    if row is None:
        return False
    await _publish_ended(broker, row, reason)
    return True


async def _publish_ended(broker: NatsBroker, row: dict[str, Any], reason: str) -> None:
    await publish(
        broker,
        ChatSessionEnded(
            tenant_id=row["tenant_id"],
            session_id=row["id"],
            user_id=row["user_id"],
            reason="idle" if reason == "idle" else "explicit",
            message_count=int(row["n"]),
        ),
    )


async def sweep_idle_sessions(*, pool: Any, broker: NatsBroker, idle_s: float) -> int:
    """End every session idle longer than ``idle_s``; returns how many this replica ended."""
    total = 0
    while True:
        rows = await repo.claim_idle_sessions(pool=pool, idle_s=idle_s)
        for row in rows:
            await _publish_ended(broker, row, "idle")
        total += len(rows)
        if len(rows) < 100:
            return total


async def idle_sweeper(*, pool: Any, broker: NatsBroker, idle_s: float, every_s: float) -> None:
    """Run the idle sweep forever (cancel to stop)."""
    while True:
        try:
            ended = await sweep_idle_sessions(pool=pool, broker=broker, idle_s=idle_s)
            if ended:
                log.info("idle sweep ended %d sessions", ended)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("idle sweep failed")
        await asyncio.sleep(every_s)
