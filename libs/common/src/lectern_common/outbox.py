"""The transactional outbox: an event that follows a database change is written in the same
transaction as the change, and a relay publishes it.

Publishing after a commit loses the event when NATS refuses or the process dies in between
(a session ended with no ``chat.session.ended``: memory never distils it). Instead,
``enqueue(conn, event)`` inserts the event into ``outbox`` on the caller's connection, inside
its transaction, and ``pg_notify``-s the relays (delivered at commit). Each service runs one
:class:`OutboxRelay`, which publishes the pending rows of the subjects that service may
publish (its NATS permissions), oldest first, with the event id as ``Nats-Msg-Id``, and marks
each one sent. A publish that fails is retried with backoff until NATS takes it, and no longer
than that: once a stream takes a publish again (its new leader is elected, its quorum is
back), the rows of that stream still waiting out their backoff are due at once, and while
rows wait the relay tries the one due soonest every poll, so a stream that came back with no
new event to publish is noticed within a poll, not after a backoff of up to
``max_backoff_s``. A row whose publish failed for another reason than NATS being unavailable
(an event that no longer validates) is neither probed nor released: it keeps its backoff.
Rows are claimed with ``FOR UPDATE SKIP LOCKED`` so replicas never publish the same row at
once, and a crash between the publish and the mark re-publishes a row that JetStream's
duplicate window (and every consumer's idempotency on the event id) drops. Sent rows are
deleted after ``retention``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from faststream.nats import NatsBroker
from opentelemetry import propagate

from lectern_common import metrics
from lectern_common.backoff import backoff_delay
from lectern_common.broker import nats_unavailable, publish_stored, stream_for
from lectern_common.db.types import Connection, Pool
from lectern_common.events import ALL_EVENTS, Event
from lectern_common.nats_auth import SERVICE_PERMISSIONS

log = logging.getLogger(__name__)

CHANNEL = "lectern_outbox"

_INSERT = """
INSERT INTO outbox (id, subject, payload, headers) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO NOTHING
"""
_CLAIM = """
SELECT id, subject, payload, headers, attempts FROM outbox
WHERE published_at IS NULL AND subject = ANY($1::text[]) AND next_attempt_at <= now()
ORDER BY created_at, id
LIMIT $2
FOR UPDATE SKIP LOCKED
"""
_SENT = """
UPDATE outbox SET published_at = now(), attempts = attempts + 1 WHERE id = ANY($1::uuid[])
"""
_FAILED = """
UPDATE outbox SET attempts = attempts + 1, last_error = $2,
    next_attempt_at = now() + make_interval(secs => $3::float8)
WHERE id = $1
"""
#: the row waiting out its backoff that is due soonest: tried every poll while rows wait (not
#: one whose publish failed for another reason than NATS being unavailable: a poison row keeps
#: its backoff)
_PROBE = """
SELECT id, subject, payload, headers, attempts FROM outbox
WHERE published_at IS NULL AND subject = ANY($1::text[]) AND next_attempt_at > now()
    AND NOT (id = ANY($2::uuid[]))
ORDER BY next_attempt_at, created_at, id
LIMIT 1
FOR UPDATE SKIP LOCKED
"""
#: a stream took a publish: its rows waiting out a backoff are due now (rows another relay
#: holds are skipped, not waited for; poison rows, as in the probe, keep their backoff)
_RELEASE = """
UPDATE outbox SET next_attempt_at = now() WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at IS NULL AND subject = ANY($1::text[]) AND next_attempt_at > now()
        AND NOT (id = ANY($2::uuid[]))
    FOR UPDATE SKIP LOCKED
)
"""
_BACKLOG = "SELECT count(*) FROM outbox WHERE published_at IS NULL AND subject = ANY($1::text[])"
_PRUNE = "DELETE FROM outbox WHERE published_at < now() - make_interval(secs => $1)"


async def enqueue(conn: Connection, event: Event, *, headers: dict[str, str] | None = None) -> None:
    """Write ``event`` to the outbox on ``conn`` (inside the caller's transaction).

    The current trace context goes with it, so the published event continues the trace of
    the request that caused it. Enqueuing the same event id twice stores it once.
    """
    await enqueue_many(conn, [event], headers=headers)


async def enqueue_many(
    conn: Connection, events: Sequence[Event], *, headers: dict[str, str] | None = None
) -> None:
    """``enqueue`` of many events in one pipelined statement and one notification a subject."""
    if not events:
        return
    carrier: dict[str, str] = dict(headers or {})
    propagate.inject(carrier)
    await conn.executemany(
        _INSERT, [(e.event_id, e.subject, e.model_dump(mode="json"), carrier) for e in events]
    )
    for subject in sorted({e.subject for e in events}):
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, subject)


def event_class(subject: str) -> type[Event]:
    """The event type published on ``subject``."""
    for cls in ALL_EVENTS:
        if cls.subject == subject:
            return cls
    raise KeyError(f"no event is published on {subject}")


def publishable_subjects(service: str) -> list[str]:
    """The event subjects ``service`` may publish (its NATS permissions), for its relay."""
    allowed = SERVICE_PERMISSIONS[service].publish
    return [s for s in allowed if isinstance(s, str) and s.startswith("lectern.")]


class OutboxRelay:
    """Publishes one service's outbox rows; ``run`` until cancelled."""

    def __init__(
        self,
        *,
        pool: Pool,
        broker: NatsBroker,
        database_url: str,
        subjects: Sequence[str],
        batch: int = 100,
        poll_s: float = 2.0,
        first_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        retention_s: float = 3600.0,
        publish_timeout_s: float = 5.0,
    ) -> None:
        self.pool = pool
        self.broker = broker
        self.database_url = database_url
        self.subjects = list(subjects)
        self.batch = batch
        self.poll_s = poll_s
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self.retention_s = retention_s
        self.publish_timeout_s = publish_timeout_s
        self._wake = asyncio.Event()
        self._pruned_at = 0.0
        #: rows whose last publish failed for another reason than NATS being unavailable (an
        #: event that no longer validates, a refused subject): never probed, only retried on
        #: their backoff (bounded: ids are forgotten past 10,000)
        self._not_probed: OrderedDict[Any, None] = OrderedDict()
        #: each subject's stream-mates among this relay's subjects (itself included)
        self._same_stream = {
            subject: [s for s in self.subjects if _stream(s) == _stream(subject)]
            for subject in self.subjects
        }

    def wake(self) -> None:
        """Look for new rows now (a notification arrived, or a caller just committed)."""
        self._wake.set()

    async def run(self) -> None:
        """Relay until cancelled; a failure of Postgres or NATS is logged and retried."""
        listener = asyncio.create_task(self._listen())
        failures = 0
        try:
            while True:
                try:
                    await self.relay_once()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures += 1
                    log.warning("outbox relay: %s (retrying)", exc)
                # the whole loop failing (Postgres or NATS down) waits twice a row's first
                # back-off (2 s by default), doubling
                delay = (
                    backoff_delay(
                        failures, first_s=2 * self.first_backoff_s, max_s=self.max_backoff_s
                    )
                    if failures
                    else self.poll_s
                )
                self._wake.clear()
                # not asyncio.wait_for: before Python 3.12 it swallows a cancellation that
                # comes as the event is set (a NOTIFY at shutdown), and the relay ran on
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def relay_once(self) -> int:
        """Publish what is pending now; returns how many rows were sent.

        When nothing is due but rows wait out a backoff, the one due soonest is tried now: a
        stream back from an outage releases the rest (see ``_relay_batch``)."""
        sent = 0
        probe = False
        while True:
            published, failed, released = await self._relay_batch(probe=probe)
            sent += published
            if failed or (published < self.batch and not released):
                if published or probe or failed:
                    break
                probe = True  # nothing was due: try a waiting row, once
                continue
            probe = False
        await self._observe()
        return sent

    async def _relay_batch(self, *, probe: bool = False) -> tuple[int, bool, int]:
        """Publish one batch of due rows (or, with ``probe``, the waiting row due soonest);
        how many were sent, whether one failed, and how many waiting rows a success made due
        (the rows of each stream that took a publish)."""
        async with self.pool.acquire() as conn, conn.transaction():
            if probe:
                rows = await conn.fetch(_PROBE, self.subjects, list(self._not_probed))
            else:
                rows = await conn.fetch(_CLAIM, self.subjects, self.batch)
            # written in claim order, their acknowledgements awaited together: one round trip
            # for the batch instead of one per event
            outcomes = await asyncio.gather(
                *(self._publish(row) for row in rows), return_exceptions=True
            )
            sent = [r["id"] for r, o in zip(rows, outcomes, strict=True) if o is None]
            released = 0
            if sent:
                await conn.execute(_SENT, sent)
                took = {r["subject"] for r, o in zip(rows, outcomes, strict=True) if o is None}
                mates = sorted({m for subject in took for m in self._same_stream[subject]})
                for row_id in sent:
                    self._not_probed.pop(row_id, None)
                released = _count(await conn.execute(_RELEASE, mates, list(self._not_probed)))
                if released:
                    log.info("outbox: a stream took a publish; %d waiting rows due now", released)
            failed = False
            for row, outcome in zip(rows, outcomes, strict=True):
                if outcome is None:
                    continue
                if not isinstance(outcome, Exception):
                    raise outcome
                failed = True
                if not nats_unavailable(outcome):
                    self._not_probed[row["id"]] = None
                    while len(self._not_probed) > 10_000:
                        self._not_probed.popitem(last=False)
                error = str(outcome)[:500] or type(outcome).__name__
                # first_backoff_s (1 s) after a row's first failure, doubling
                delay = backoff_delay(
                    row["attempts"] + 1, first_s=self.first_backoff_s, max_s=self.max_backoff_s
                )
                await conn.execute(_FAILED, row["id"], error, delay)
                log.warning("outbox: %s %s not published: %s", row["subject"], row["id"], outcome)
            return len(sent), failed, released

    async def _publish(self, row: Any) -> None:
        payload = row["payload"]
        data = json.loads(payload) if isinstance(payload, str) else payload
        event = event_class(row["subject"]).model_validate(data)
        headers = {str(k): str(v) for k, v in dict(row["headers"] or {}).items()}
        js = self.broker.config.connection_state.stream
        await publish_stored(js, event, headers=headers, timeout=self.publish_timeout_s)

    async def _observe(self) -> None:
        backlog = await self.pool.fetchval(_BACKLOG, self.subjects)
        metrics.OUTBOX_BACKLOG.set(float(backlog), subjects=",".join(sorted(self.subjects)))
        now = time.monotonic()
        if now - self._pruned_at > 60.0:
            self._pruned_at = now
            await self.pool.execute(_PRUNE, self.retention_s)

    async def _listen(self) -> None:
        """A dedicated connection LISTENing for commits of new rows (reconnects forever)."""

        def notified(*_: object) -> None:
            self._wake.set()

        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.database_url, timeout=10)
                closed = asyncio.Event()
                conn.add_termination_listener(_setter(closed))
                await conn.add_listener(CHANNEL, notified)
                self._wake.set()  # rows committed while we were not listening
                await closed.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("outbox listener: %s", exc)
            finally:
                if conn is not None and not conn.is_closed():
                    await conn.close(timeout=2)
            await asyncio.sleep(2.0)


def _stream(subject: str) -> str:
    """The stream holding ``subject``; a subject no stream holds (a request subject among a
    service's permissions) is a stream of its own."""
    try:
        return stream_for(subject).name
    except KeyError:
        return subject


def _count(status: str) -> int:
    """The row count of a command's status (``UPDATE 3`` -> 3)."""
    return int(status.rsplit(" ", 1)[-1])


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    """A callback setting ``event`` (asyncpg's termination listener)."""

    def set_event(_: object) -> None:
        event.set()

    return set_event
