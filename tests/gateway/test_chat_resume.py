"""A dropped answer stream resumes: numbered SSE events, ``Last-Event-ID``, an
``Idempotency-Key`` that never asks twice, replay from storage, and no daily-limit charge for
a turn the server failed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import httpx
import pytest
from httpx_sse import aconnect_sse
from lectern_testing.chat import (
    Gateway,
    new_session,
    offline_gateway,
    seed_document,
)

from lectern_common.db.types import Pool
from lectern_common.errors import UpstreamError
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.prompt import Prompt
from lectern_gateway.chat.running_turns import TurnLog, TurnRegistry
from lectern_gateway.chat.sse import parse_event
from lectern_gateway.chat.streamer import Piece, TextDelta

pytestmark = pytest.mark.integration

QUESTION = "What does RuBisCO catalyse?"


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


Frame = tuple[str, str, str]  # id, event, data


async def _read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    stop_after: int | None = None,
    **kwargs: Any,
) -> tuple[httpx.Response, list[Frame]]:
    frames: list[Frame] = []
    async with aconnect_sse(client, method, url, headers=headers, **kwargs) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            return source.response, frames
        async for sse in source.aiter_sse():
            frames.append((sse.id, sse.event, sse.data))
            if stop_after is not None and len(frames) >= stop_after:
                break  # the connection drops here
    return source.response, frames


def _gated(real: Any, gate: asyncio.Event) -> Any:
    """The real streamer, pausing after its first text until ``gate`` is set."""

    async def stream(prompt: Prompt) -> AsyncGenerator[Piece, None]:
        first = True
        async for piece in real(prompt):
            yield piece
            if first and isinstance(piece, TextDelta):
                first = False
                await gate.wait()

    return stream


async def _messages_today(pool: Any, tenant_id: str, user_id: str) -> int:
    value = await pool.fetchval(
        "SELECT messages FROM usage_counters WHERE tenant_id = $1 AND user_id = $2",
        tenant_id,
        user_id,
    )
    return int(value or 0)


async def test_a_dropped_stream_resumes_with_last_event_id_and_the_whole_answer_once(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-1")
    session = await new_session(client, gateway, headers)
    url = f"{gateway.url}/v1/sessions/{session['id']}/messages"
    key = {"Idempotency-Key": f"ask-{uuid.uuid4()}"}
    real = gateway.deps.streamer
    gate = asyncio.Event()
    gateway.deps.streamer = _gated(real, gate)
    try:
        response, first = await _read(
            client, "POST", url, {**headers, **key}, json={"content": QUESTION}, stop_after=2
        )
    finally:
        gateway.deps.streamer = real
    assert response.status_code == 200
    turn_id = response.headers["X-Lectern-Turn-Id"]
    assert [f[1] for f in first] == ["sources", "token"]
    assert [f[0] for f in first] == [f"{turn_id}:1", f"{turn_id}:2"]
    gate.set()  # the answer goes on without its reader

    # the client retries: same key, the last id it saw
    response, rest = await _read(
        client, "POST", url, {**headers, **key, "Last-Event-ID": first[-1][0]},
        json={"content": QUESTION},
    )  # fmt: skip
    assert response.status_code == 200 and response.headers["X-Lectern-Replay"] == "true"
    frames = first + rest
    assert [f[0] for f in frames] == [f"{turn_id}:{n}" for n in range(1, len(frames) + 1)]
    events = [parse_event(f[2]) for f in frames]
    assert events[-1].type == "done" and sum(e.type == "done" for e in events) == 1
    done = events[-1]
    assert str(done.user_message_id) == turn_id
    text = "".join(e.text for e in events if e.type == "token")
    stored = await db_pool.fetchval(
        "SELECT content FROM chat_messages WHERE id = $1", done.message_id
    )
    assert text == stored and "[T1]" in text
    # asked once, answered once, counted once
    roles = await db_pool.fetch(
        "SELECT role FROM chat_messages WHERE session_id = $1", uuid.UUID(session["id"])
    )
    assert [r["role"] for r in roles] == ["user", "assistant"]
    assert await _messages_today(db_pool, tenant_id, "stu-1") == 1

    # the turn's events URL replays the same stream from storage on any replica
    turns: TurnRegistry = gateway.deps.turns
    turns.turns.pop(uuid.UUID(turn_id), None)  # as if another replica answered it
    events_url = f"{gateway.url}{response.headers['Content-Location']}"
    _, replayed = await _read(client, "GET", events_url, headers)
    assert _decoded(replayed) == _decoded(frames)  # jsonb keeps the data, not its key order
    _, tail = await _read(client, "GET", events_url, {**headers, "Last-Event-ID": frames[-3][0]})
    assert _decoded(tail) == _decoded(frames[-2:])


async def test_another_replica_follows_a_turn_still_being_answered(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-2")
    session = await new_session(client, gateway, headers)
    real = gateway.deps.streamer
    gate = asyncio.Event()
    gateway.deps.streamer = _gated(real, gate)
    turns: TurnRegistry = gateway.deps.turns
    try:
        response, first = await _read(
            client, "POST", f"{gateway.url}/v1/sessions/{session['id']}/messages", headers,
            json={"content": QUESTION}, stop_after=2,
        )  # fmt: skip
    finally:
        gateway.deps.streamer = real
    turn_id = uuid.UUID(response.headers["X-Lectern-Turn-Id"])
    local = turns.turns[turn_id]
    await asyncio.sleep(2 * turns.flush_s)  # what was streamed so far is stored
    del turns.turns[turn_id]  # this "replica" now reads from Postgres only
    events_url = f"{gateway.url}{response.headers['Content-Location']}"
    reader = asyncio.create_task(
        _read(client, "GET", events_url, {**headers, "Last-Event-ID": first[-1][0]})
    )
    await asyncio.sleep(0.5)
    assert not reader.done(), "the stored turn is still streaming: the reader waits"
    gate.set()
    _, rest = await asyncio.wait_for(reader, timeout=20)
    assert [parse_event(f[2]).type for f in rest][-1] == "done"
    assert len(first) + len(rest) == len(local.events)


async def test_a_turn_failed_by_the_server_is_not_counted_and_its_key_asks_again(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-3")
    session = await new_session(client, gateway, headers)
    url = f"{gateway.url}/v1/sessions/{session['id']}/messages"
    key = {"Idempotency-Key": "same-question"}
    real = gateway.deps.streamer

    async def broken(prompt: Prompt) -> AsyncGenerator[Piece, None]:
        raise UpstreamError("every model is down (injected)", reason="upstream_unavailable")
        yield  # pragma: no cover

    gateway.deps.streamer = broken
    try:
        _, failed = await _read(client, "POST", url, {**headers, **key}, json={"content": QUESTION})
    finally:
        gateway.deps.streamer = real
    assert parse_event(failed[-1][2]).type == "error"
    await _until(lambda: _messages_today(db_pool, tenant_id, "stu-3"), 0)

    _, again = await _read(client, "POST", url, {**headers, **key}, json={"content": QUESTION})
    assert parse_event(again[-1][2]).type == "done"
    assert await _messages_today(db_pool, tenant_id, "stu-3") == 1


async def test_an_unknown_turn_is_404(
    gateway: Gateway, client: httpx.AsyncClient, tenant_id: str
) -> None:
    headers = gateway.token(tenant_id, "stu-4")
    session = await new_session(client, gateway, headers)
    response = await client.get(
        f"{gateway.url}/v1/sessions/{session['id']}/messages/{uuid.uuid4()}/events",
        headers=headers,
    )
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


def _decoded(frames: list[Frame]) -> list[tuple[str, str, Any]]:
    return [(i, e, json.loads(d)) for i, e, d in frames]


async def _until(read: Any, wanted: int) -> None:
    for _ in range(50):
        if await read() == wanted:
            return
        await asyncio.sleep(0.1)
    assert await read() == wanted


async def test_stop_cancels_the_turn_on_the_server(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "stu-5")
    session = await new_session(client, gateway, headers)
    real = gateway.deps.streamer
    gate = asyncio.Event()  # never set: the model would stall mid-answer
    gateway.deps.streamer = _gated(real, gate)
    try:
        response, first = await _read(
            client, "POST", f"{gateway.url}/v1/sessions/{session['id']}/messages", headers,
            json={"content": QUESTION}, stop_after=2,
        )  # fmt: skip
        turn_id = response.headers["X-Lectern-Turn-Id"]
        cancel = f"{gateway.url}/v1/sessions/{session['id']}/messages/{turn_id}/cancel"
        assert (await client.post(cancel, headers=headers)).status_code == 202
        events_url = f"{gateway.url}{response.headers['Content-Location']}"
        _, rest = await _read(client, "GET", events_url, {**headers, "Last-Event-ID": first[-1][0]})
    finally:
        gateway.deps.streamer = real
    last = parse_event(rest[-1][2])
    assert last.type == "error" and last.reason == "abandoned"
    roles = await db_pool.fetch(
        "SELECT role FROM chat_messages WHERE session_id = $1", uuid.UUID(session["id"])
    )
    assert [r["role"] for r in roles] == ["user"]
    assert (await client.post(cancel, headers=headers)).status_code == 409


class _SlowAfterWrite:
    """The real pool, its ``execute`` returning only ``pause`` seconds after the statement
    ran: a caller cancelled in that time had its write land all the same."""

    def __init__(self, pool: Any, pause: float) -> None:
        self._pool = pool
        self.pause = pause
        self.written = asyncio.Event()

    async def execute(self, query: str, *args: Any) -> str:
        done: str = await self._pool.execute(query, *args)
        self.written.set()
        await asyncio.sleep(self.pause)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


async def test_a_flush_cancelled_after_its_write_landed_is_not_stored_again(
    gateway: Gateway, client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    """The periodic flusher is cancelled as a turn ends; a write it had sent still lands, and
    the final flush must not store those events a second time (seen under load: a taken-over
    answer stored twice over)."""
    headers = gateway.token(tenant_id, "stu-5")
    session = await new_session(client, gateway, headers)
    local = TurnLog(turn_id=uuid.uuid4())
    assert await repo.insert_turn(
        pool=db_pool, turn_id=local.turn_id, session_id=uuid.UUID(session["id"]),
        tenant_id=tenant_id, user_id="stu-5", idempotency_key=None,
    )  # fmt: skip
    await repo.own_turn(
        pool=db_pool, turn_id=local.turn_id, counted_on=None, owner=local.owner, inputs={}
    )
    slow = _SlowAfterWrite(db_pool, pause=0.5)
    registry = TurnRegistry(pool=cast(Pool, slow))
    local.events = [{"type": "token", "text": "Carbon "}, {"type": "token", "text": "fixation"}]
    flusher = asyncio.create_task(registry._flush(local, status="streaming"))
    await asyncio.wait_for(slow.written.wait(), timeout=10)
    flusher.cancel()  # as the turn's end cancels the periodic flusher
    local.events.append({"type": "done"})
    assert await registry._flush(local, status="done")
    stored = await db_pool.fetchval("SELECT events FROM chat_turns WHERE id = $1", local.turn_id)
    assert [e["type"] for e in stored] == ["token", "token", "done"]
