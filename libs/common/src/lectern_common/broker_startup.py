"""A service's start-up steps against JetStream, run again while JetStream cannot answer yet:
declaring the streams and starting the broker's subscribers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from faststream.nats import NatsBroker
from nats import errors as nats_errors
from nats.js import JetStreamContext
from nats.js import errors as js_errors

from lectern_common.broker import ensure_streams

log = logging.getLogger(__name__)

#: what JetStream's API answers while it cannot serve a consumer yet: no reply in time (a
#: leader still being elected), "temporarily unavailable", or nothing listening at all
_JETSTREAM_NOT_READY = (
    nats_errors.TimeoutError,
    nats_errors.NoRespondersError,
    js_errors.ServiceUnavailableError,
)


async def start_broker(broker: NatsBroker, *, timeout: float) -> None:
    """Start the broker's subscribers, starting again while JetStream cannot answer yet.

    Each pull subscriber asks its stream's leader for its consumer at start; just after a
    cluster forms, or on a loaded machine, that request can time out or be refused as
    "temporarily unavailable" (seen: a service of a 3-node stack exited with "Application
    startup failed" and was restarted), and a server still starting may have no JetStream to
    answer. After ``timeout`` seconds the last error is raised.

    A start that fails stops every subscriber before the next one. FastStream's
    ``broker.start()`` starts each subscriber again, and a concurrent pull subscriber
    (``max_workers`` > 1) that had started would swap its in-memory queue for a new one its
    running consumer never reads: its pull loop fetched into that queue, so the replica took
    messages it never handled, each redelivered only after its ack wait with a delivery
    spent, until the queue filled and it stopped fetching (seen: an ingest replica of the
    cluster test that indexed nothing while two uploads failed ``too_many_deliveries``).
    """

    async def start() -> None:
        try:
            await broker.start()
        except _JETSTREAM_NOT_READY:
            await stop_subscribers(broker)
            raise

    await until_jetstream_answers(start, what="starting the subscribers", timeout=timeout)


async def stop_subscribers(broker: NatsBroker) -> None:
    """Stop each of the broker's subscribers, started or not (its tasks, its subscription, its
    queue), so that the next start begins afresh; the broker's connection stays open."""
    for subscriber in broker.subscribers:
        await subscriber.stop()


async def declare_streams(js: JetStreamContext, *, replicas: int, timeout: float) -> None:
    """``ensure_streams`` at a service's start, again while JetStream cannot answer yet (it is
    idempotent); after ``timeout`` seconds the last error is raised."""

    async def declare() -> None:
        await ensure_streams(js, replicas=replicas)

    await until_jetstream_answers(declare, what="declaring the streams", timeout=timeout)


async def until_jetstream_answers(
    step: Callable[[], Awaitable[None]], *, what: str, timeout: float
) -> None:
    """Run ``step``, and again with a growing pause (0.5 s to 5 s, a WARNING each time) while
    it fails because JetStream cannot answer yet, for at most ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    delay = 0.5
    while True:
        try:
            await step()
            return
        except _JETSTREAM_NOT_READY as exc:
            if asyncio.get_running_loop().time() + delay > deadline:
                raise
            log.warning(
                "JetStream cannot answer yet (%s, %s); again in %.1f s",
                what,
                type(exc).__name__,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
