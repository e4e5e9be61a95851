"""The review queue's conflicting sources come from ingest as events; the gateway owns them.

Ingest compares each newly indexed document with the tenant's library and announces the
disagreeing pairs of chunks (``documents.conflicts``, written to its outbox). Every gateway
worker process (``lectern_gateway.worker``) consumes them through one durable pull consumer
(``CONFLICTS_DURABLE``, shared: each event reaches one worker) and queues each pair once in
``source_conflicts``, so a redelivered or repeated event adds nothing; teachers read and
resolve the queue through ``review.routes``. While no worker runs the events wait in the
stream (30 days).
"""

from __future__ import annotations

import logging

from faststream.exceptions import NackMessage
from faststream.nats import NatsBroker, NatsMessage

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries, durable_subscriber, stream_for
from lectern_common.events import ConflictsFound, Subjects
from lectern_common.service import ServiceState
from lectern_gateway.review import repository as repo

log = logging.getLogger(__name__)

CONFLICTS_DURABLE = "lectern-gateway-conflicts"
#: an event the database could not record is redelivered (backing off to 30 s) this often
#: before JetStream gives up on it: about 25 minutes of Postgres away
MAX_EVENT_DELIVERIES = 50


def consumers() -> list[tuple[str, str]]:
    """The (stream, durable) pair of the conflicts consumer, for the lag report."""
    return [(stream_for(Subjects.DOCUMENTS_CONFLICTS).name, CONFLICTS_DURABLE)]


def subscribe(broker: NatsBroker, state: ServiceState) -> None:
    """Register the durable consumer of ``documents.conflicts`` on the gateway's broker."""
    subject = Subjects.DOCUMENTS_CONFLICTS

    @durable_subscriber(
        broker, subject, durable=CONFLICTS_DURABLE, max_deliver=MAX_EVENT_DELIVERIES
    )
    async def on_conflicts(event: ConflictsFound, message: NatsMessage) -> None:
        """Queue the pairs (Postgres away: redelivered later)."""
        try:
            added = await repo.add_conflicts(
                pool=state.db(), tenant_id=event.tenant_id, pairs=event.pairs
            )
        except Exception as exc:
            delay = backoff_delay(deliveries(message), first_s=2.0, max_s=30.0)
            log.warning("conflicts not queued (%s); retrying in %.1f s", type(exc).__name__, delay)
            raise NackMessage(delay=delay) from exc
        if added:
            log.info(
                "tenant %s: %d conflicting source(s) queued for review", event.tenant_id, added
            )
