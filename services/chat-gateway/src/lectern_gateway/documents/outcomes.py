"""A document's outcome reaches its catalogue row as ingest's events (issue 61).

The gateway owns ``documents``; ingest owns its own record of each upload and never writes
the gateway's row. It announces each outcome through its outbox, in the transaction that
stores it: ``documents.indexed`` (searchable, or a duplicate of a document that is) and
``documents.failed``; while it works it reports ``documents.progress``. Every gateway
process, HTTP replica and worker alike, consumes them through one durable pull consumer per
subject (shared: each event reaches one process) and writes them to the row here: a
pending document ingest reports progress on is ``processing``; an outcome brings its status,
counts, hashes and errors, the version it replaced marked superseded, a duplicate's uploaders
made co-owners of the original. The document's status stream applies an outcome it sees at
once, so a client waiting on it never waits for the consumer. Applying is idempotent: only a
row still pending work takes an outcome, so a redelivered, repeated or late event changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from faststream.exceptions import NackMessage
from faststream.nats import NatsBroker, NatsMessage

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries, durable_subscriber, stream_for
from lectern_common.db.types import Pool
from lectern_common.events import DocumentFailed, DocumentIndexed, DocumentProgress, Subjects
from lectern_common.service import ServiceState
from lectern_gateway.documents import repository as repo

log = logging.getLogger(__name__)

#: the durable consumer of each outcome, shared by every gateway process
OUTCOME_DURABLES = {
    Subjects.DOCUMENTS_INDEXED: "lectern-gateway-indexed",
    Subjects.DOCUMENTS_FAILED: "lectern-gateway-failed",
    Subjects.DOCUMENTS_PROGRESS: "lectern-gateway-progress",
}
#: an outcome the database could not record is redelivered (backing off to 30 s) this often
#: before JetStream gives up on it: about 25 minutes of Postgres away
MAX_EVENT_DELIVERIES = 50


async def apply(pool: Pool, event: DocumentIndexed | DocumentFailed | DocumentProgress) -> bool:
    """Write the outcome (or that work is under way) to the document's row; False when the
    row was no longer pending work (already applied, deleted meanwhile, or no such row)."""
    if isinstance(event, DocumentProgress):  # one statement, often repeated: no transaction
        return await repo.mark_processing(pool, event.document_id)
    if isinstance(event, DocumentFailed):
        return await repo.apply_failed(pool, event)
    async with pool.acquire() as conn, conn.transaction():
        return await repo.apply_indexed(conn, event)


def consumers() -> list[tuple[str, str]]:
    """The (stream, durable) pairs of the outcome consumers, for the lag report."""
    return [(stream_for(s).name, durable) for s, durable in OUTCOME_DURABLES.items()]


def subscribe(broker: NatsBroker, state: ServiceState) -> None:
    """Register the durable consumers of ``documents.indexed``, ``.failed`` and
    ``.progress``."""

    def consumer(subject: str) -> Callable[[Callable[..., Any]], object]:
        durable = OUTCOME_DURABLES[subject]
        return durable_subscriber(
            broker, subject, durable=durable, max_deliver=MAX_EVENT_DELIVERIES
        )

    async def record(
        event: DocumentIndexed | DocumentFailed | DocumentProgress, message: NatsMessage
    ) -> None:
        try:
            applied = await apply(state.db(), event)
        except Exception as exc:
            delay = backoff_delay(deliveries(message), first_s=2.0, max_s=30.0)
            log.warning(
                "outcome of document %s not recorded (%s); retrying in %.1f s",
                event.document_id, type(exc).__name__, delay,
            )  # fmt: skip
            raise NackMessage(delay=delay) from exc
        if applied:
            log.debug("document %s: outcome %s recorded", event.document_id, event.subject)

    @consumer(Subjects.DOCUMENTS_INDEXED)
    async def on_indexed(event: DocumentIndexed, message: NatsMessage) -> None:
        """The document is searchable (or a duplicate): its row says so."""
        await record(event, message)

    @consumer(Subjects.DOCUMENTS_FAILED)
    async def on_failed(event: DocumentFailed, message: NatsMessage) -> None:
        """The document could not be indexed: its row says why."""
        await record(event, message)

    @consumer(Subjects.DOCUMENTS_PROGRESS)
    async def on_progress(event: DocumentProgress, message: NatsMessage) -> None:
        """Ingest is working on the document: a pending row becomes ``processing``."""
        await record(event, message)
