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
    answer. FastStream creates a subscription only where none exists, so a second start picks
    up where the first stopped; after ``timeout`` seconds the last error is raised.
    """
    await until_jetstream_answers(broker.start, what="starting the subscribers", timeout=timeout)


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
