"""Thin subscribers: decode, call the service, publish, and settle the message."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from faststream.exceptions import NackMessage, RejectMessage
from faststream.nats import NatsBroker, NatsMessage
from pydantic import ValidationError

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries, park
from lectern_common.errors import PermanentError, RetryableError
from lectern_common.events import ChatSessionEnded, ChatTurnCompleted, QuizAttempted, UserErased
from lectern_memory import erasure
from lectern_memory.service import MemoryService

log = logging.getLogger(__name__)
SERVICE = "lectern-memory"


def backoff(attempt: int) -> float:
    """Seconds before a redelivery after ``attempt`` deliveries (2, doubling, at most 30)."""
    return backoff_delay(attempt, first_s=2.0, max_s=30.0)


async def handle_turn(
    service: MemoryService,
    pool: Any,
    body: Any,
    message: NatsMessage | None = None,
    broker: NatsBroker | None = None,
) -> None:
    """chat.turn.completed -> record its signals (an invalid message is parked)."""
    try:
        event = ChatTurnCompleted.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting invalid chat.turn.completed: %s", exc)
        if broker is not None and message is not None:
            await park(broker, message, service=SERVICE, reason="invalid_message",
                       detail=str(exc))  # fmt: skip
        raise RejectMessage() from exc
    try:
        await service.record_turn(pool=pool, event=event)
    except Exception as exc:
        # Postgres unreachable, say: redeliver later instead of FastStream's reject, which
        # would drop the turn's signals for good
        attempt = deliveries(message) if message is not None else 1
        log.warning("turn %s not recorded (%s); retrying", event.event_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc


async def handle_session_ended(
    service: MemoryService,
    pool: Any,
    broker: NatsBroker,
    body: Any,
    message: NatsMessage,
    *,
    max_deliveries: int,
) -> None:
    """chat.session.ended -> distil (memory.distilled goes out through the outbox); a message
    that is invalid or cannot be distilled is parked."""
    try:
        event = ChatSessionEnded.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting invalid chat.session.ended: %s", exc)
        await park(broker, message, service=SERVICE, reason="invalid_message", detail=str(exc))
        raise RejectMessage() from exc
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
    service: MemoryService, pool: Any, broker: NatsBroker, body: Any, message: NatsMessage
) -> None:
    """quiz.attempted -> struggles and mastered topics (an invalid message is parked)."""
    try:
        event = QuizAttempted.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting invalid quiz.attempted: %s", exc)
        await park(broker, message, service=SERVICE, reason="invalid_message", detail=str(exc))
        raise RejectMessage() from exc
    try:
        await service.record_quiz(pool=pool, event=event)
    except Exception as exc:
        attempt = deliveries(message)
        log.warning("quiz attempt %s not recorded (%s); retrying", event.attempt_id,
                    type(exc).__name__)  # fmt: skip
        raise NackMessage(delay=backoff(attempt)) from exc


async def handle_user_erased(
    pool: Any, broker: NatsBroker, body: Any, message: NatsMessage
) -> None:
    """users.erased -> delete every row kept about the user (an invalid message is parked);
    a re-delivery finds nothing left and changes nothing."""
    try:
        event = UserErased.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting invalid users.erased: %s", exc)
        await park(broker, message, service=SERVICE, reason="invalid_message", detail=str(exc))
        raise RejectMessage() from exc
    try:
        erased = await erasure.erase_user(pool, event)
    except Exception as exc:
        attempt = deliveries(message)
        log.warning("erasure %s not done (%s); retrying", event.event_id, type(exc).__name__)
        raise NackMessage(delay=backoff(attempt)) from exc
    # the erasure's id, never the user's
    log.info("erasure %s: %d rows deleted", event.event_id, sum(erased.values()))
