"""Erasing a user at the school's request: the gateway's rows go in one transaction that also
writes ``users.erased`` to the outbox; the memory service erases its own rows on that event.

Erased by the gateway (``repository.erase_gateway_rows``): sessions with their messages,
tutor checks, kept turn events and the flags on their answers; the user's flags, knowledge
gaps, notices, quiz attempts, the quizzes they drew for themselves, daily usage counts, roster
entries, and every outbox row of an event about them (pending or sent); the quality
dashboard's gap topics are counted down by the user's gaps (the topic is the question's own
words), and a topic nobody else asked is deleted. Erased by the memory service: memories,
turn signals, distillations, quiz tallies.

Kept, on purpose: what a user made for others (documents they uploaded, personas, quizzes
assigned to a class, rosters they manage, the audit trail of staff actions: these name a
member of staff, not a student); the dashboard's counts (per day, without a user); the
erasure record (``erased_users``: a hash of tenant and user, never the id), which stops an
event about the user that is still in flight from bringing their data back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from faststream.nats import NatsBroker

from lectern_common.db.types import Pool
from lectern_common.errors import RetryableError
from lectern_common.events import UserErased, erased_user_key
from lectern_common.outbox import enqueue
from lectern_gateway.memories import service as memories
from lectern_gateway.privacy import repository as repo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Erasure:
    """The outcome of an erasure request."""

    event: UserErased
    #: rows this request deleted (or, for gap topics, counted down), by table
    erased: dict[str, int] = field(default_factory=dict)
    #: the memory service still keeps rows of the user (it erases them on ``users.erased``)
    memory_pending: bool = False
    #: nothing was left to erase: the user had been erased before (the earlier erasure)
    already_erased: bool = False


async def erase_user(
    *,
    pool: Pool,
    broker: NatsBroker,
    tenant_id: str,
    user_id: str,
    erased_by: str,
    timeout: float,
) -> Erasure | None:
    """Erase everything the gateway keeps about the user and publish ``users.erased``
    (through the outbox, in the same transaction); None when there is nothing to erase and
    the user was never erased. Whether the memory service still keeps rows of the user is
    asked of it first (within ``timeout``); when it does not answer, it is taken to keep
    some, so the erasure never waits for it: the event reaches it when it is back.

    Idempotent: when nothing is left the earlier erasure is answered and nothing published;
    when only the memory service's rows are left (it has not consumed the event yet) the
    earlier event is written again with its own id, which JetStream and the consumer drop
    as a duplicate or act on once.
    """
    key = erased_user_key(tenant_id, user_id)
    memory_left = await _memory_keeps(broker, tenant_id=tenant_id, user_id=user_id,
                                      timeout=timeout)  # fmt: skip
    async with pool.acquire() as conn, conn.transaction():
        await repo.lock_user(conn, tenant_id=tenant_id, user_id=user_id)
        erased = await repo.erase_gateway_rows(conn, tenant_id=tenant_id, user_id=user_id)
        earlier = await repo.tombstone(conn, tenant_id=tenant_id, user_key=key)
        if not any(erased.values()) and not memory_left:
            if earlier is None:
                return None
            return Erasure(event=_event(tenant_id, user_id, earlier), already_erased=True)
        if any(erased.values()) or earlier is None:
            event = UserErased(tenant_id=tenant_id, user_id=user_id)
            await repo.record_erasure(
                conn, tenant_id=tenant_id, user_key=key, erased_at=event.occurred_at,
                event_id=event.event_id, erased_by=erased_by,
            )  # fmt: skip
        else:
            event = _event(tenant_id, user_id, earlier)
        await enqueue(conn, event)
    return Erasure(event=event, erased=erased, memory_pending=memory_left)


async def _memory_keeps(
    broker: NatsBroker, *, tenant_id: str, user_id: str, timeout: float
) -> bool:
    try:
        kept = await memories.export(broker, tenant_id=tenant_id, user_id=user_id,
                                     timeout=timeout)  # fmt: skip
    except RetryableError as exc:
        log.warning("erasure: the memory service did not say what it keeps (%s)", exc.message)
        return True
    return kept.holds_anything()


def _event(tenant_id: str, user_id: str, record: dict[str, Any]) -> UserErased:
    return UserErased(
        event_id=record["event_id"],
        occurred_at=record["erased_at"],
        tenant_id=tenant_id,
        user_id=user_id,
    )
