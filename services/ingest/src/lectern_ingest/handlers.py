"""Thin subscribers: run the worker on a ``documents.uploaded`` event, or apply a teacher's
change of a document to its chunks; settle the message."""

from __future__ import annotations

import logging

from faststream.exceptions import NackMessage
from faststream.nats import NatsBroker, NatsMessage

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries, park
from lectern_common.db.types import Pool
from lectern_common.events import DocumentUploaded
from lectern_ingest import lifecycle
from lectern_ingest.service import IngestWorker

log = logging.getLogger(__name__)


async def handle_uploaded(
    worker: IngestWorker,
    event: DocumentUploaded,
    message: NatsMessage,
    broker: NatsBroker | None = None,
) -> None:
    """Index one uploaded document; ack on any outcome but a retryable error (nack + delay).
    One given up on after its deliveries is parked on the dead-letter stream (with
    ``broker``) before it is settled (an invalid message never gets here: the broker's
    ``InvalidMessages`` parks it)."""
    service = worker.settings.service_name
    delivered = deliveries(message)
    try:
        outcome = await worker.process(
            event=event, deliveries=delivered, keepalive=message.in_progress
        )
    except Exception as exc:
        # an infrastructure fault the worker could not even record (Postgres unreachable):
        # FastStream would reject (terminate) the message and the upload would be lost, left
        # `processing`; redeliver it with the worker's backoff instead
        delay = worker.retry_delay_for(delivered)
        log.warning(
            "upload %s could not be processed (%s: %s); redelivering in %.1f s",
            event.document_id, type(exc).__name__, exc, delay,
        )  # fmt: skip
        raise NackMessage(delay=delay) from exc
    if outcome.gave_up is not None and broker is not None:
        await park(broker, message, service=service, reason=outcome.gave_up,
                   detail=f"document {event.document_id} failed: {outcome.gave_up}")  # fmt: skip
    if outcome.retry_after is not None:
        raise NackMessage(delay=outcome.retry_after)


async def handle_document_change(
    pool: Pool, event: lifecycle.DocumentChange, message: NatsMessage | None
) -> None:
    """documents.updated / archived / restored / deleted -> ingest's record of the document
    and its chunks brought to the change (``lifecycle.apply``, idempotent); redelivered with a
    growing delay when Postgres cannot be reached."""
    try:
        status = await lifecycle.apply(pool, event)
    except Exception as exc:
        attempt = deliveries(message) if message is not None else 1
        delay = backoff_delay(attempt, first_s=0.5, max_s=30.0)
        log.warning(
            "chunks of document %s not settled (%s: %s); redelivering in %.1f s",
            event.document_id, type(exc).__name__, exc, delay,
        )  # fmt: skip
        raise NackMessage(delay=delay) from exc
    log.info("chunks of document %s settled to %s", event.document_id, status or "gone")
