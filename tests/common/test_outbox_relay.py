"""The outbox relay after a stream outage: the rows that waited out their backoff go as soon
as their stream takes a publish again, not a backoff of up to 30 s later.

On the cluster stack, uploads accepted while a stream's leader was being elected were
indexed 33 s later: their ``documents.uploaded`` rows had doubled their backoff to 16 s
through the election and the quorum loss that followed, and waited it out while fresh
uploads of the same stream were published at once. Here the outage is real: a NATS server
of the test's own, with no stream declared, answers every publish "no response from stream"
(as a stream without a leader does) until the streams are declared.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from lectern_common.broker import create_broker, ensure_streams
from lectern_common.events import Event, Subjects
from lectern_common.events.feedback import FeedbackFlagged, KnowledgeGapDetected
from lectern_common.events.memory import MemoryDistilled
from lectern_common.outbox import OutboxRelay, enqueue_many
from lectern_common.runtime import EmbeddedNats

pytestmark = pytest.mark.integration

#: two subjects of one stream (LECTERN_FEEDBACK) and one of another (LECTERN_MEMORY)
SUBJECTS = [Subjects.FEEDBACK_FLAGGED, Subjects.KNOWLEDGE_GAP_DETECTED, Subjects.MEMORY_DISTILLED]


@pytest.fixture
async def own_nats(tmp_path: Path) -> AsyncIterator[str]:
    """A JetStream server of the test's own, its streams not declared yet."""
    server = EmbeddedNats(tmp_path / "nats")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def relay(own_nats: str, fresh_pool: Any, fresh_database: str) -> AsyncIterator[OutboxRelay]:
    """The relay on its own NATS and database, a failed row due again only after 60 s (a
    backoff long past the test's time: only the release or the probe can send it)."""
    broker = create_broker(own_nats, service_name="test-outbox")
    await broker.connect()
    try:
        yield OutboxRelay(
            pool=fresh_pool,
            broker=broker,
            database_url=fresh_database,
            subjects=SUBJECTS,
            first_backoff_s=60.0,
            max_backoff_s=600.0,
            publish_timeout_s=2.0,
        )
    finally:
        await broker.stop()


def _flag(tenant: str) -> FeedbackFlagged:
    return FeedbackFlagged(
        tenant_id=tenant, flag_id=uuid.uuid4(), message_id=uuid.uuid4(),
        session_id=uuid.uuid4(), user_id="u1", reason="unclear",
    )  # fmt: skip


def _gap(tenant: str) -> KnowledgeGapDetected:
    return KnowledgeGapDetected(
        tenant_id=tenant, gap_id=uuid.uuid4(), session_id=uuid.uuid4(), user_id="u1",
        question="what is osmosis?", confidence=0.1,
    )  # fmt: skip


def _distilled(tenant: str) -> MemoryDistilled:
    return MemoryDistilled(tenant_id=tenant, session_id=uuid.uuid4(), user_id="u1")


async def _enqueue(pool: Any, events: list[Event]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await enqueue_many(conn, events)


async def _rows(pool: Any) -> dict[str, tuple[bool, int, str | None]]:
    """Each row's event id: (published, attempts, last error)."""
    rows = await pool.fetch("SELECT id::text, published_at, attempts, last_error FROM outbox")
    return {r["id"]: (r["published_at"] is not None, r["attempts"], r["last_error"]) for r in rows}


async def _stored(nats_url: str, stream: str) -> int:
    nc = await nats.connect(nats_url)
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    finally:
        await nc.close()


async def _fail_while_no_stream(relay: OutboxRelay, events: list[Event]) -> None:
    """``events`` enqueued and tried while no stream exists: each fails and backs off."""
    await _enqueue(relay.pool, events)
    assert await relay.relay_once() == 0
    rows = await _rows(relay.pool)
    for event in events:
        published, attempts, error = rows[str(event.event_id)]
        assert not published and attempts >= 1, rows
        assert error and "no response" in error.lower(), error


async def test_a_publish_the_stream_takes_sends_its_waiting_rows_at_once(
    relay: OutboxRelay, own_nats: str
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    waiting: list[Event] = [_flag(tenant), _gap(tenant), _flag(tenant)]
    other_stream = _distilled(tenant)
    await _fail_while_no_stream(relay, [*waiting, other_stream])
    # the streams are back (a leader elected); a fresh event of LECTERN_FEEDBACK is published
    # and releases the feedback stream's waiting rows, of both its subjects, in the same call
    nc = await nats.connect(own_nats)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()
    fresh = _flag(tenant)
    await _enqueue(relay.pool, [fresh])
    assert await relay.relay_once() == 4
    rows = await _rows(relay.pool)
    assert all(rows[str(e.event_id)][0] for e in [*waiting, fresh]), rows
    assert await _stored(own_nats, "LECTERN_FEEDBACK") == 4
    # the memory stream took no publish: its row still waits out its backoff
    assert rows[str(other_stream.event_id)][0] is False
    assert await _stored(own_nats, "LECTERN_MEMORY") == 0


async def test_with_nothing_new_to_publish_a_waiting_row_is_tried_every_poll(
    relay: OutboxRelay, own_nats: str
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    waiting: list[Event] = [_distilled(tenant), _flag(tenant), _gap(tenant)]
    await _fail_while_no_stream(relay, waiting)
    # still no stream: the probe of the row due soonest fails too and sends nothing
    assert await relay.relay_once() == 0
    attempts = {e: a for e, (_, a, _) in (await _rows(relay.pool)).items()}
    assert sorted(attempts.values()) == [1, 1, 2], attempts
    nc = await nats.connect(own_nats)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()
    # nothing is due for a minute, yet each stream is probed in turn as its rows come up:
    # the first probe's stream releases its mates; the next poll's probe finds the other
    sent = await relay.relay_once()
    sent += await relay.relay_once()
    assert sent == 3
    rows = await _rows(relay.pool)
    assert all(rows[str(e.event_id)][0] for e in waiting), rows
    assert await _stored(own_nats, "LECTERN_FEEDBACK") == 2
    assert await _stored(own_nats, "LECTERN_MEMORY") == 1
    assert await relay.relay_once() == 0


async def test_a_row_that_fails_for_another_reason_keeps_its_backoff(
    relay: OutboxRelay, own_nats: str
) -> None:
    nc = await nats.connect(own_nats)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    # a row no event validates from (a field missing): NATS is there, the row is wrong
    poison = uuid.uuid4()
    await relay.pool.execute(
        "INSERT INTO outbox (id, subject, payload, headers) VALUES ($1, $2, $3, $4)",
        poison, Subjects.FEEDBACK_FLAGGED, {"tenant_id": tenant}, {},
    )  # fmt: skip
    assert await relay.relay_once() == 0
    first = (await _rows(relay.pool))[str(poison)]
    assert first[:2] == (False, 1) and first[2] and "validation" in first[2].lower(), first
    # neither the probe (nothing else waits) nor a publish the stream takes tries it again
    assert await relay.relay_once() == 0
    await _enqueue(relay.pool, [_flag(tenant)])
    assert await relay.relay_once() == 1
    assert (await _rows(relay.pool))[str(poison)][:2] == (False, 1)
    waiting = await relay.pool.fetchval(
        "SELECT next_attempt_at > now() FROM outbox WHERE id = $1", poison
    )
    assert waiting is True


async def test_the_relay_ends_when_cancelled_as_a_notify_wakes_it(relay: OutboxRelay) -> None:
    """A service stopping while a handler's NOTIFY wakes the relay: cancelled as its wake-up
    event is set, the relay ends (it waited with ``asyncio.wait_for``, which swallowed that
    cancellation before Python 3.12, and the service's shutdown then waited on it for ever)."""
    await ensure_streams(relay.broker.config.connection_state.stream, replicas=1)
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.5)  # past its first pass, waiting for a wake-up or the next poll
    relay._wake.set()
    task.cancel()
    async with asyncio.timeout(3):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
