"""Deliveries: the tenant events consumed from JetStream become rows, and a worker sends them.

Every gateway worker process (``lectern_gateway.worker``) consumes the streams of
``WEBHOOK_STREAMS`` through one durable pull consumer per stream (``WEBHOOK_DURABLE``, shared:
each event reaches one worker), and writes a pending delivery for each enabled webhook of the
event's tenant that asked for its type (idempotent per webhook and event id, so a redelivered
message adds nothing). Each worker's :class:`DeliveryWorker` claims due deliveries
``FOR UPDATE SKIP LOCKED`` and leases them past the request's timeout, so no two workers send
one delivery at once, and a worker killed mid-delivery leaves a lease that runs out: the
delivery is sent again, with the same ``webhook-id``, as Standard Webhooks allows. It checks
the URL's host again (``check_host``: the address may have changed since registration), POSTs the
event's JSON signed the Standard Webhooks way, logs the attempt, and schedules the next one
from ``webhook_retry_schedule_s``. A delivery that used up the schedule fails; a webhook whose
deliveries failed ``webhook_disable_after_failures`` times running is disabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from faststream.exceptions import NackMessage
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from nats.js.api import ConsumerConfig, DeliverPolicy

from lectern_common.backoff import backoff_delay
from lectern_common.broker import deliveries
from lectern_common.db.types import Pool
from lectern_common.service import ServiceState
from lectern_gateway.background import BackgroundLoop
from lectern_gateway.config import Settings
from lectern_gateway.documents.fetch import UrlRefused, check_host
from lectern_gateway.webhooks import repository as repo
from lectern_gateway.webhooks.signing import (
    WEBHOOK_EVENTS,
    WEBHOOK_STREAMS,
    delivery_headers,
    retry_delay,
)

log = logging.getLogger(__name__)

WEBHOOK_DURABLE = "lectern-gateway-webhooks"
#: a message the database could not record is redelivered (backing off to 30 s) this often
#: before JetStream gives up on it: about 25 minutes of Postgres away
MAX_EVENT_DELIVERIES = 50
MAX_ERROR_CHARS = 500
PRUNE_EVERY_S = 3600.0


def consumers() -> list[tuple[str, str]]:
    """The (stream, durable) pairs the dispatcher consumes, for the lag report."""
    return [(stream, WEBHOOK_DURABLE) for stream in WEBHOOK_STREAMS]


def _occurred_at(body: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(body["occurred_at"]))
    except (KeyError, ValueError):
        return datetime.now(UTC)


async def record_event(
    *, pool: Pool, subject: str, body: Any, payload: bytes, headers: dict[str, str]
) -> int:
    """Write a pending delivery of an event for every webhook that wants it; how many."""
    if subject not in WEBHOOK_EVENTS or not isinstance(body, dict):
        return 0
    try:
        tenant_id = str(body["tenant_id"])
        event_id = uuid.UUID(str(body["event_id"]))
    except (KeyError, ValueError):
        log.warning("event on %s without a tenant or an event id: not delivered", subject)
        return 0
    return await repo.record_event(
        pool,
        tenant_id=tenant_id,
        event_id=event_id,
        event_type=subject,
        occurred_at=_occurred_at(body),
        payload=payload.decode(),
        headers={k: v for k, v in headers.items() if k.startswith("ce-")},
    )


def subscribe(broker: NatsBroker, state: ServiceState, wake: Callable[[], None]) -> None:
    """Register the durable consumers of the webhook streams on the gateway's broker;
    ``wake`` tells this replica's delivery worker that deliveries were added."""
    config = ConsumerConfig(
        # a new consumer starts with the events published from then on, not a year's backlog
        deliver_policy=DeliverPolicy.NEW,
        max_deliver=MAX_EVENT_DELIVERIES,
        ack_wait=60.0,
    )
    for stream in WEBHOOK_STREAMS:

        @broker.subscriber(
            "lectern.>",
            stream=JStream(stream, declare=False),
            durable=WEBHOOK_DURABLE,
            pull_sub=PullSub(batch_size=50, timeout=5.0),
            config=config,
        )
        async def on_event(body: Any, message: NatsMessage) -> None:
            """Record the deliveries of one event (Postgres away: redelivered later)."""
            raw = message.raw_message
            try:
                added = await record_event(
                    pool=state.db(),
                    subject=raw.subject,
                    body=body,
                    payload=raw.data,
                    headers=dict(raw.headers or {}),
                )
            except Exception as exc:
                attempt = deliveries(message)
                log.warning("webhook deliveries not recorded (%s); retrying", type(exc).__name__)
                raise NackMessage(delay=backoff_delay(attempt, first_s=2.0, max_s=30.0)) from exc
            if added:
                wake()


class DeliveryWorker(BackgroundLoop):
    """Sends due deliveries of every tenant, a few at once, until cancelled."""

    task_name = "lectern-webhook-deliveries"

    def __init__(
        self, *, pool: Pool, settings: Settings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        super().__init__()
        self.pool = pool
        self.settings = settings
        self.transport = transport
        self.pruned_at = -PRUNE_EVERY_S

    async def run(self) -> None:
        """Claim and send due deliveries until :meth:`stop` (or cancelled)."""
        async with httpx.AsyncClient(
            follow_redirects=False,
            transport=self.transport,
            timeout=self.settings.webhook_timeout_s,
        ) as client:
            while not self.stopping:
                claimed = 0
                try:
                    claimed = await self.send_due(client)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("webhook deliveries failed; retrying next interval")
                if claimed < self.settings.webhook_concurrency and not self.stopping:
                    # asyncio.timeout, not wait_for: see ``OutboxRelay.run``
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.settings.webhook_poll_interval_s):
                            await self.wake.wait()
                    self.wake.clear()

    async def send_due(self, client: httpx.AsyncClient) -> int:
        """Claim up to ``webhook_concurrency`` due deliveries and send them; how many."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await repo.claim_due(
                conn,
                limit=self.settings.webhook_concurrency,
                lease_s=self.settings.webhook_timeout_s + self.settings.webhook_lease_margin_s,
            )
        results = await asyncio.gather(
            *(self.attempt(client, row) for row in rows), return_exceptions=True
        )
        for row, result in zip(rows, results, strict=True):
            # the webhook deleted meanwhile, or Postgres away: the lease runs out, it is retried
            if isinstance(result, Exception):
                log.warning("webhook delivery %s not recorded: %r", row["id"], result)
        if time.monotonic() - self.pruned_at >= PRUNE_EVERY_S:
            self.pruned_at = time.monotonic()
            await self.prune()
        return len(rows)

    async def prune(self) -> int:
        """Delete the deliveries finished more than the retention ago; how many."""
        deleted = await repo.prune_deliveries(
            self.pool, older_than_s=self.settings.webhook_retention_days * 86400
        )
        if deleted:
            log.info("pruned %d finished webhook deliveries", deleted)
        return deleted

    async def attempt(self, client: httpx.AsyncClient, row: dict[str, Any]) -> None:
        """One attempt at one delivery, logged, then its next step."""
        status_code, error, duration_ms = await self.post(client, row)
        attempts = int(row["attempts"]) + 1
        async with self.pool.acquire() as conn, conn.transaction():
            await repo.record_attempt(
                conn,
                delivery_id=row["id"],
                status_code=status_code,
                error=error,
                duration_ms=duration_ms,
            )
            if error is None:
                await repo.mark_succeeded(conn, delivery_id=row["id"], webhook_id=row["webhook_id"])
                return
            delay = retry_delay(attempts, self.settings.webhook_retry_schedule_s)
            if delay is not None:
                await repo.mark_retry(conn, delivery_id=row["id"], delay_s=delay)
                return
            limit = self.settings.webhook_disable_after_failures
            disabled = await repo.mark_failed(
                conn,
                delivery_id=row["id"],
                webhook_id=row["webhook_id"],
                disable_after=limit,
                reason=f"{limit} deliveries in a row failed; the last: {error}",
            )
        if disabled:
            log.warning(
                "webhook %s of tenant %s disabled after %d failed deliveries (last: %s)",
                row["webhook_id"], row["tenant_id"], limit, error,
            )  # fmt: skip

    async def post(
        self, client: httpx.AsyncClient, row: dict[str, Any]
    ) -> tuple[int | None, str | None, int]:
        """POST the event: (HTTP status or None, error or None, milliseconds taken)."""
        body = row["payload"].encode()
        headers = delivery_headers(
            row["secret"],
            msg_id=str(row["event_id"]),
            timestamp=int(time.time()),
            body=body,
            extra=row["headers"],
        )
        timeout_s = self.settings.webhook_timeout_s
        started = time.monotonic()
        status_code: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(timeout_s):
                await check_host(row["url"], self.settings.url_fetch_allowed_networks)
                # the answer's body is never read: a receiver cannot make us hold megabytes
                async with client.stream("POST", row["url"], content=body, headers=headers) as r:
                    status_code = r.status_code
            if not 200 <= status_code < 300:
                error = f"HTTP {status_code}"
        except UrlRefused as exc:
            error = f"url_refused: {exc.message}"
        except ValueError as exc:  # a host name idna cannot encode, say
            error = f"url_refused: {exc}"
        except TimeoutError:
            error = f"timed out after {timeout_s:g} s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return status_code, error[:MAX_ERROR_CHARS] if error else None, _ms_since(started)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
