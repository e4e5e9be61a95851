"""A gateway replica that stops mid-answer: the client resumes on another replica, which takes
the turn over and continues the stream (every event once, one stored answer, one
``chat.turn.completed``); a turn whose replica is alive is followed, never taken over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any, cast

import httpx
import pytest
from httpx_sse import aconnect_sse
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    published,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_common.db.types import Pool
from lectern_common.events import Subjects
from lectern_common.runtime.nats import free_port
from lectern_gateway.chat.prompt import Prompt
from lectern_gateway.chat.running_turns import TurnRegistry
from lectern_gateway.chat.sse import parse_event
from lectern_gateway.chat.streamer import Piece, TextDelta

pytestmark = pytest.mark.integration

QUESTION = "What does RuBisCO catalyse?"

Frame = tuple[str, str, str]  # id, event, data


@pytest.fixture(scope="module")
async def replicas(
    nats_url: str, database_url: str, db_pool: Any
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateway replicas on the same NATS and Postgres (default take-over bound, 3 s)."""
    async with (
        run_responders(nats_url, Responders(pool=db_pool)),
        serve_gateway(gateway_settings(nats_url, database_url)) as a,
        serve_gateway(gateway_settings(nats_url, database_url)) as b,
    ):
        yield a, b


@pytest.fixture(autouse=True)
def _revive(replicas: tuple[Gateway, Gateway]) -> Iterator[None]:
    """Replica A writes to Postgres again after each test, whatever the test did to it."""
    a_turns: TurnRegistry = replicas[0].deps.turns
    pool = a_turns.pool
    yield
    a_turns.pool = pool


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


class _DeadPool:
    """What a replica's writes meet once its process is gone: nothing."""

    async def execute(self, *args: Any) -> str:
        raise ConnectionError("this replica is down (simulated)")

    async def fetchrow(self, *args: Any) -> Any:
        raise ConnectionError("this replica is down (simulated)")


def _paused(real: Any, gate: asyncio.Event, *, after: int) -> Any:
    """The real streamer, stopping after ``after`` text deltas until ``gate`` is set."""

    async def stream(prompt: Prompt) -> AsyncGenerator[Piece, None]:
        deltas = 0
        async for piece in real(prompt):
            yield piece
            if isinstance(piece, TextDelta):
                deltas += 1
                if deltas == after:
                    await gate.wait()

    return stream


async def _read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    stop_after: int | None = None,
    **kwargs: Any,
) -> tuple[httpx.Response, list[Frame], list[float]]:
    frames: list[Frame] = []
    times: list[float] = []
    async with aconnect_sse(client, method, url, headers=headers, **kwargs) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            return source.response, frames, times
        async for sse in source.aiter_sse():
            frames.append((sse.id, sse.event, sse.data))
            times.append(time.perf_counter())
            if stop_after is not None and len(frames) >= stop_after:
                break  # the connection drops here
    return source.response, frames, times


@pytest.mark.parametrize(
    "case",
    [
        "unsaved",  # A stops before its first write: the client has events Postgres has not
        "saved",  # A wrote what it streamed before it stopped
        # B's answerer cannot promise the same text: it restarts the answer, after the ids
        # the client got from A (which A never stored)
        "restart-unsaved",
    ],
)
async def test_a_survivor_takes_over_a_turn_whose_replica_stopped_and_every_event_comes_once(
    replicas: tuple[Gateway, Gateway],
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    jetstream: Any,
    case: str,
) -> None:
    a, b = replicas
    b_turns: TurnRegistry = b.deps.turns
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = a.token(tenant_id, "stu-1")
    # the undisturbed answer, in a session of its own
    reference = await ask(client, b, (await new_session(client, b, headers))["id"], QUESTION,
                          headers)  # fmt: skip
    assert reference.status == 200 and len(reference.of("token")) >= 2  # stopped mid-answer
    session = await new_session(client, a, headers)
    url = f"/v1/sessions/{session['id']}/messages"
    key = {"Idempotency-Key": f"ask-{uuid.uuid4()}"}
    a_turns: TurnRegistry = a.deps.turns
    real, gate = a.deps.streamer, asyncio.Event()
    a.deps.streamer = _paused(real, gate, after=1)
    try:
        response, first, _ = await _read(
            client, "POST", a.url + url, {**headers, **key}, json={"content": QUESTION},
            stop_after=2,
        )  # fmt: skip
    finally:
        a.deps.streamer = real
    turn_id = uuid.UUID(response.headers["X-Lectern-Turn-Id"])
    if not case.endswith("unsaved"):
        await asyncio.sleep(3 * a_turns.flush_s)
    # replica A stops: no write of it reaches Postgres any more (its run hangs at the gate,
    # as a process frozen or cut off would)
    live_pool = a_turns.pool
    a_turns.pool = cast(Pool, _DeadPool())
    killed = time.perf_counter()
    stored_before = len(await db_pool.fetchval("SELECT events FROM chat_turns WHERE id = $1",
                                               turn_id))  # fmt: skip

    if case == "saved":
        assert stored_before == len(first)
    # the client retries on replica B: same key, the last id it saw
    b_turns.exact_rerun = not case.startswith("restart")
    try:
        response, rest, times = await _read(
            client, "POST", b.url + url, {**headers, **key, "Last-Event-ID": first[-1][0]},
            json={"content": QUESTION},
        )  # fmt: skip
    finally:
        b_turns.exact_rerun = True
    assert response.status_code == 200 and response.headers["X-Lectern-Replay"] == "true"
    resumed_after = times[0] - killed
    done_after = times[-1] - killed
    print(
        f"\ntake-over ({case}): {stored_before} of {len(first)} events stored before the stop; "
        f"first resumed event {resumed_after:.2f} s after it, done {done_after:.2f} s"
    )
    restart_at = max(stored_before, len(first)) + 1  # after every id the client had
    if case.startswith("restart"):
        # the client discards what it had of the turn; the ids only grow
        assert rest[0][1] == "restart" and rest[0][0] == f"{turn_id}:{restart_at}"
        frames = rest[1:]
        ids = [f"{turn_id}:{n}" for n in range(restart_at + 1, restart_at + 1 + len(frames))]
    else:
        frames = first + rest
        ids = [f"{turn_id}:{n}" for n in range(1, len(frames) + 1)]
    assert [f[0] for f in frames] == ids
    events = [parse_event(f[2]) for f in frames]
    assert "restart" not in [e.type for e in events]
    assert [e.type for e in events] == [e.type for e in reference.events]
    text = "".join(e.text for e in events if e.type == "token")
    assert text == reference.text and "[T1]" in text
    done = events[-1]
    assert done.type == "done" and sum(e.type == "done" for e in events) == 1
    assert str(done.user_message_id) == str(turn_id)
    # the take-over bound after A's last write (up to one flush before it stopped), then the
    # re-run
    bound = b.settings.turn_takeover_s
    assert bound - a_turns.flush_s - 0.1 <= resumed_after < bound + 5.0

    # replica A wakes up: its run goes on but stores nothing (fenced by the turn's owner)
    a_turns.pool = live_pool
    gate.set()
    for _ in range(100):
        if turn_id not in a_turns.turns:
            break
        await asyncio.sleep(0.1)
    assert turn_id not in a_turns.turns, "A learned that B took its turn over"

    rows = await db_pool.fetch(
        "SELECT id, role, content FROM chat_messages WHERE session_id = $1 ORDER BY created_at",
        uuid.UUID(session["id"]),
    )
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert rows[1]["id"] == done.message_id and rows[1]["content"] == text
    row = await db_pool.fetchrow(
        "SELECT status, takeovers, answer_id, events FROM chat_turns WHERE id = $1", turn_id
    )
    assert row["status"] == "done" and row["takeovers"] == 1
    assert row["answer_id"] == done.message_id
    kept = [e["type"] for e in row["events"]]
    if case.startswith("restart"):
        assert kept[:stored_before] == [f[1] for f in first][:stored_before]
        assert set(kept[stored_before : restart_at - 1]) <= {"hole"}  # never sent
        assert kept[restart_at - 1] == "restart"
        kept = kept[restart_at:]
    assert kept == [e.type for e in events]
    used = await db_pool.fetchval(
        "SELECT messages FROM usage_counters WHERE tenant_id = $1 AND user_id = $2",
        tenant_id, "stu-1",
    )  # fmt: skip
    assert used == 2  # the reference question and this one, each once
    completed = await published(jetstream, Subjects.CHAT_TURN_COMPLETED, tenant_id, expect=2)
    ours = [t for t in completed if t["user_message_id"] == str(turn_id)]
    assert [t["assistant_message_id"] for t in ours] == [str(done.message_id)]

    # the events URL replays the whole turn, once, on either replica
    for replica in (a, b):
        _, replayed, _ = await _read(client, "GET", f"{replica.url}{url}/{turn_id}/events",
                                     headers)  # fmt: skip
        assert [f[0] for f in replayed][-len(frames) :] == [f[0] for f in frames]
        assert len(replayed) == sum(e["type"] != "hole" for e in row["events"])


async def test_a_turn_whose_replica_is_alive_is_followed_not_taken_over(
    replicas: tuple[Gateway, Gateway], client: httpx.AsyncClient, db_pool: Any, tenant_id: str
) -> None:
    a, b = replicas
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = a.token(tenant_id, "stu-2")
    session = await new_session(client, a, headers)
    url = f"/v1/sessions/{session['id']}/messages"
    a_turns: TurnRegistry = a.deps.turns
    real, gate = a.deps.streamer, asyncio.Event()
    a.deps.streamer = _paused(real, gate, after=1)
    try:
        response, first, _ = await _read(
            client, "POST", a.url + url, headers, json={"content": QUESTION}, stop_after=2
        )
    finally:
        a.deps.streamer = real
    turn_id = uuid.UUID(response.headers["X-Lectern-Turn-Id"])
    reader = asyncio.create_task(
        _read(client, "GET", f"{b.url}{url}/{turn_id}/events",
              {**headers, "Last-Event-ID": first[-1][0]})
    )  # fmt: skip
    await asyncio.sleep(b.settings.turn_takeover_s + 1.0)  # A's heartbeat keeps the row fresh
    assert not reader.done(), "B follows the turn while A answers it"
    assert await db_pool.fetchval(
        "SELECT takeovers FROM chat_turns WHERE id = $1", turn_id
    ) == 0  # fmt: skip
    gate.set()
    _, rest, _ = await asyncio.wait_for(reader, timeout=20)
    assert parse_event(rest[-1][2]).type == "done"
    assert len(first) + len(rest) == len(a_turns.turns[turn_id].events)
    assert await db_pool.fetchval(
        "SELECT count(*) FROM chat_messages WHERE session_id = $1 AND role = 'assistant'",
        uuid.UUID(session["id"]),
    ) == 1  # fmt: skip


async def test_a_gateway_process_sigkilled_mid_answer_is_taken_over(
    replicas: tuple[Gateway, Gateway],
    client: httpx.AsyncClient,
    db_pool: Any,
    tenant_id: str,
    nats_url: str,
    database_url: str,
) -> None:
    """Replica A is a real process, killed with SIGKILL after it sent the sources and while
    it holds the answer back (the free plan's delay past its soft limit)."""
    _, b = replicas
    await seed_document(db_pool, tenant_id=tenant_id)
    port = free_port()
    env = {
        **os.environ,
        "LECTERN_NATS_URL": nats_url,
        "LECTERN_DATABASE_URL": database_url,
        "LECTERN_JWT_SECRET": b.settings.effective_jwt_secret,
        "LECTERN_LOG_JSON": "false",
        "LECTERN_GATEWAY_HTTP_PORT": str(port),
        "LECTERN_GATEWAY_IDLE_SWEEP_INTERVAL_S": "0",
        "LECTERN_GATEWAY_GAP_CLOSURE_INTERVAL_S": "0",
        "LECTERN_GATEWAY_MEMORY_TIMEOUT_S": "0.2",
        "LECTERN_GATEWAY_FREE_SOFT_LIMIT": "0",
        "LECTERN_GATEWAY_FREE_SOFT_DELAY_S": "20",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lectern_gateway", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    a_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{a_url}/readyz")).status_code == 200:
                    break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("gateway process not ready in 60 s")
        reference = await ask(client, b, (await new_session(client, b, b.token(
            tenant_id, "stu-ref")))["id"], QUESTION, b.token(tenant_id, "stu-ref"))  # fmt: skip
        headers = b.token(tenant_id, "stu-3", plan="free")
        session = await new_session(client, b, headers)
        url = f"/v1/sessions/{session['id']}/messages"
        key = {"Idempotency-Key": f"ask-{uuid.uuid4()}"}
        response, first, _ = await _read(
            client, "POST", a_url + url, {**headers, **key}, json={"content": QUESTION},
            stop_after=1,
        )  # fmt: skip
        assert [f[1] for f in first] == ["sources"]
        await asyncio.sleep(1.0)  # stored; A now waits out the plan's delay
        process.kill()
        killed = time.perf_counter()
        await process.wait()
        response, rest, times = await _read(
            client, "POST", b.url + url, {**headers, **key, "Last-Event-ID": first[-1][0]},
            json={"content": QUESTION},
        )  # fmt: skip
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    print(
        f"\nSIGKILL take-over: first resumed event {times[0] - killed:.2f} s after the kill, "
        f"done {times[-1] - killed:.2f} s"
    )
    assert response.headers["X-Lectern-Replay"] == "true"
    frames = first + rest
    turn_id = first[0][0].split(":")[0]
    assert [f[0] for f in frames] == [f"{turn_id}:{n}" for n in range(1, len(frames) + 1)]
    events = [parse_event(f[2]) for f in frames]
    assert [e.type for e in events] == [e.type for e in reference.events]
    assert "".join(e.text for e in events if e.type == "token") == reference.text
    assert await db_pool.fetchval(
        "SELECT count(*) FROM chat_messages WHERE session_id = $1 AND role = 'assistant'",
        uuid.UUID(session["id"]),
    ) == 1  # fmt: skip
    assert await db_pool.fetchval(
        "SELECT messages FROM usage_counters WHERE tenant_id = $1 AND user_id = 'stu-3'",
        tenant_id,
    ) == 1  # fmt: skip
