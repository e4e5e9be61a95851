"""Thin subscriber: decode ``documents.uploaded``, run the worker, settle the message."""

from __future__ import annotations

import logging
from typing import Any

from faststream.exceptions import NackMessage, RejectMessage
from faststream.nats import NatsMessage
from pydantic import ValidationError

from lectern_common.broker import deliveries
from lectern_common.events import DocumentUploaded
from lectern_ingest.service import IngestWorker

log = logging.getLogger(__name__)


async def handle_uploaded(worker: IngestWorker, body: Any, message: NatsMessage) -> None:
    """Index one uploaded document; ack on any outcome but a retryable error (nack + delay)."""
    try:
        event = DocumentUploaded.model_validate(body)
    except ValidationError as exc:
        log.error("rejecting an invalid documents.uploaded message: %s", exc)
        raise RejectMessage() from exc
    outcome = await worker.process(
        event=event, deliveries=deliveries(message), keepalive=message.in_progress
    )
    if outcome.retry_after is not None:
        raise NackMessage(delay=outcome.retry_after)
