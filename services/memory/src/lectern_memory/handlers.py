"""Thin subscribers: call the service with the decoded event, and settle the message.

FastStream decodes each event before these run; a message that does not decode is parked
and rejected by the broker's ``InvalidMessages`` and never reaches them."""

from __future__ import annotations

import logging

import asyncpg
from faststream.exceptions import NackMessage, RejectMessage
from faststream.nats import NatsBroker, NatsMessage

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries, park
from lectern_common.db.types import Pool
from lectern_common.errors import PermanentError, RetryableError
from lectern_common.events import (
    ChatSessionEnded,
    ChatSessionsExpired,
    ChatTurnCompleted,
    FeedbackFlagged,
    QuizAttempted,
    UserErased,
)
from lectern_memory import erasure
from lectern_memory import repository as repo
from lectern_memory.service import MemoryService

log = logging.getLogger(__name__)
SERVICE = "lectern-memory"


def backoff(attempt: int) -> float:
    """Seconds before a redelivery after ``attempt`` deliveries (2, doubling, at most 30)."""
    return backoff_delay(attempt, first_s=2.0, max_s=30.0)


async def handle_turn(
    service: MemoryService, pool: Pool, event: ChatTurnCompleted, message: NatsMessage | None = None
) -> None:
    """chat.turn.completed -> record its signals."""
    try:
        await service.record_turn(pool=pool, event=event)
    except Exception as exc:
        # Postgres unreachable, say: redeliver later instead of FastStream's reject, which
        # would drop the turn's signals for good
        attempt = deliveries(message) if message is not None else 1
        log.warning("turn %s not recorded (%s); retrying", event.event_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc


async def handle_flagged(pool: Pool, event: FeedbackFlagged, message: NatsMessage | None) -> None:
    """feedback.flagged -> record the flag, so the session's distillation counts its answer
    as flagged (before or after the turn's signals arrive); a re-delivery changes nothing."""
    try:
        async with pool.acquire() as conn:
            await repo.record_flag(conn, event)
    except Exception as exc:
        attempt = deliveries(message) if message is not None else 1
        log.warning("flag %s not recorded (%s); retrying", event.flag_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc


async def handle_session_ended(
    service: MemoryService,
    pool: Pool,
    broker: NatsBroker,
    event: ChatSessionEnded,
    message: NatsMessage,
    *,
    max_deliveries: int,
) -> None:
    """chat.session.ended -> distil (memory.distilled goes out through the outbox); a session
    that cannot be distilled is parked."""
    attempt = deliveries(message)
    try:
        distilled = await service.distil_session(
            pool=pool, event=event, final_attempt=attempt >= max_deliveries - 1
        )
    except PermanentError as exc:
        log.error("session %s cannot be distilled: %s", event.session_id, exc.message)
        await park(broker, message, service=SERVICE, reason="permanent_error", detail=exc.message)
        raise RejectMessage() from exc
    except (RetryableError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        # a model or Postgres that is down: redeliver with backoff, never drop the session
        log.info("session %s: %s; retrying (delivery %d)", event.session_id, exc, attempt)
        raise NackMessage(delay=backoff(attempt)) from exc
    log.info("session %s distilled (%s)", distilled.session_id, distilled.distiller)


async def handle_quiz_attempted(
    service: MemoryService, pool: Pool, event: QuizAttempted, message: NatsMessage
) -> None:
    """quiz.attempted -> struggles and mastered topics."""
    try:
        await service.record_quiz(pool=pool, event=event)
    except Exception as exc:
        attempt = deliveries(message)
        log.warning("quiz attempt %s not recorded (%s); retrying", event.attempt_id,
                    type(exc).__name__)  # fmt: skip
        raise NackMessage(delay=backoff(attempt)) from exc


async def handle_user_erased(pool: Pool, event: UserErased, message: NatsMessage | None) -> None:
    """users.erased -> delete every row kept about the user; a re-delivery finds nothing left
    and changes nothing."""
    try:
        erased = await erasure.erase_user(pool, event)
    except Exception as exc:
        attempt = deliveries(message) if message is not None else 1
        log.warning("erasure %s not done (%s); retrying", event.event_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc
    # the erasure's id, never the user's
    log.info("erasure %s: %d rows deleted", event.event_id, sum(erased.values()))


async def handle_sessions_expired(
    pool: Pool, event: ChatSessionsExpired, message: NatsMessage | None
) -> None:
    """chat.sessions.expired -> delete the copies of those sessions' turns (the gateway
    deleted the sessions past their tenant's retention); a re-delivery deletes nothing more."""
    try:
        async with pool.acquire() as conn, conn.transaction():
            deleted = await repo.forget_sessions(
                conn, tenant_id=event.tenant_id, session_ids=list(event.session_ids)
            )
    except Exception as exc:
        attempt = deliveries(message) if message is not None else 1
        log.warning("expiry %s not done (%s); retrying", event.event_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc
    log.info("expiry %s: %d turn signals deleted", event.event_id, deleted)
