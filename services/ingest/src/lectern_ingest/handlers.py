"""Thin subscriber: decode ``documents.uploaded``, run the worker, settle the message."""

from __future__ import annotations

import logging
from typing import Any

from faststream.exceptions import NackMessage, RejectMessage
from faststream.nats import NatsBroker, NatsMessage
from pydantic import ValidationError

from lectern_common.broker import deliveries, park
from lectern_common.events import DocumentUploaded
from lectern_ingest.service import IngestWorker

log = logging.getLogger(__name__)


async def handle_uploaded(
    worker: IngestWorker, body: Any, message: NatsMessage, broker: NatsBroker | None = None
) -> None:
    """Index one uploaded document; ack on any outcome but a retryable error (nack + delay).
    An invalid message, or one given up on after its deliveries, is parked on the
    dead-letter stream (with ``broker``) before it is settled."""
    service = worker.settings.service_name
    try:
        event = DocumentUploaded.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting an invalid documents.uploaded message: %s", exc)
        if broker is not None:
            await park(broker, message, service=service, reason="invalid_message",
                       detail=str(exc))  # fmt: skip
        raise RejectMessage() from exc
    outcome = await worker.process(
        event=event, deliveries=deliveries(message), keepalive=message.in_progress
    )
    if outcome.gave_up is not None and broker is not None:
        await park(broker, message, service=service, reason=outcome.gave_up,
                   detail=f"document {event.document_id} failed: {outcome.gave_up}")  # fmt: skip
    if outcome.retry_after is not None:
        raise NackMessage(delay=outcome.retry_after)
