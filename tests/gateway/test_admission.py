"""Admission under overload: a replica's adaptive limit on turns waiting for their first
token, and the 503 with Retry-After a question past it gets (real gateway, NATS, Postgres)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    Responders,
    ask,
    gateway_settings,
    new_session,
    run_responders,
    seed_document,
    serve_gateway,
)

from lectern_common.events import RerankReply, RerankRequest
from lectern_gateway.chat.admission import RETRY_AFTER_MAX_S, Admission


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(**kwargs: Any) -> tuple[Admission, Clock]:
    clock = Clock()
    values: dict[str, Any] = {"target_s": 5.0, "initial": 10, "floor": 2, "spread": lambda: 1.0}
    values.update(kwargs)
    return Admission(clock=clock, **values), clock


def waited(gate: Admission, clock: Clock, wait_s: float) -> None:
    """One turn admitted, whose first token came after ``wait_s``."""
    ticket = gate.enter()
    assert ticket is not None
    clock.now += wait_s
    ticket.settle()


def test_a_full_limit_admits_none_and_a_place_given_back_admits_again() -> None:
    gate, _ = admission(initial=3)
    tickets = [gate.enter() for _ in range(3)]
    assert all(t is not None for t in tickets) and gate.waiting == 3
    assert gate.enter() is None  # the fourth waits for none of them
    first = tickets[0]
    assert first is not None
    first.release()  # stopped before its first token: no measure, its place is free
    first.settle()  # given back once: later calls change nothing
    assert gate.waiting == 2 and gate.limit == 3
    assert gate.enter() is not None


def test_slow_first_tokens_lower_the_limit_to_what_was_waiting_once_per_target() -> None:
    gate, clock = admission(initial=20)
    tickets = [gate.enter() for _ in range(10)]
    assert None not in tickets
    clock.now += 8.0
    tickets[0].settle()  # type: ignore[union-attr]
    # 9 still waiting and this one: 10 were too many, the limit falls to 0.8 of them
    assert gate.limit == pytest.approx(8.0)
    clock.now += 1.0
    tickets[1].settle()  # type: ignore[union-attr]
    assert gate.limit == pytest.approx(8.0)  # the same overload: not lowered twice at once
    clock.now += 5.0
    tickets[2].settle()  # type: ignore[union-attr]
    assert gate.limit == pytest.approx(8 * 0.8)
    for ticket in tickets[3:]:
        ticket.release()  # type: ignore[union-attr]
    for _ in range(20):
        waited(gate, clock, 30.0)
    assert gate.limit == 2  # never under the floor: a replica always answers someone


def test_the_plans_pacing_is_not_counted_as_the_stacks_wait() -> None:
    gate, clock = admission(initial=4)
    ticket = gate.enter()
    assert ticket is not None
    clock.now += 6.0
    ticket.settle(less_s=5.0)  # 5 s of it the free plan's deliberate delay
    assert gate.limit == 4 and gate.wait_s == pytest.approx(1.0)


def test_first_tokens_in_time_raise_the_limit_only_while_it_is_in_use() -> None:
    gate, clock = admission(initial=4, ceiling=6)
    waited(gate, clock, 0.5)  # one turn of a limit of 4: the limit was not what held it
    assert gate.limit == 4
    for _ in range(40):
        held = [gate.enter() for _ in range(int(gate.limit))]
        assert None not in held
        clock.now += 0.5
        for ticket in held:
            ticket.settle()  # type: ignore[union-attr]
    assert gate.limit == 6  # grew by about one a round of turns, up to the ceiling


async def test_no_target_admits_every_question_at_once() -> None:
    gate, _ = admission(target_s=0.0, initial=1)
    assert all([await gate.admit() is not None for _ in range(100)])


def test_retry_after_is_about_the_admitted_turns_wait() -> None:
    gate, clock = admission(target_s=2.0)
    assert gate.retry_after_s() == 2  # nothing measured yet: the target
    for _ in range(30):
        waited(gate, clock, 12.0)
    assert gate.retry_after_s() == 12
    spread, clock = admission(target_s=2.0, spread=lambda: 1.5)
    waited(spread, clock, 100.0)
    assert spread.retry_after_s() == RETRY_AFTER_MAX_S


async def test_questions_wait_in_line_first_come_first_served() -> None:
    gate, _ = admission(initial=1, floor=1, patience_s=5.0)
    first = await gate.admit()
    assert first is not None
    later = [asyncio.create_task(gate.admit()) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert gate.in_line == 2 and not any(t.done() for t in later)
    assert gate.enter() is None  # nobody passes the line
    first.release()
    second = await asyncio.wait_for(later[0], 1)  # the first in line gets the place
    assert second is not None and not later[1].done() and gate.in_line == 1
    second.release()
    assert await asyncio.wait_for(later[1], 1) is not None
    assert gate.in_line == 0 and gate.waiting == 1


async def test_a_question_whose_patience_runs_out_or_finds_the_line_full_is_refused() -> None:
    gate, _ = admission(initial=1, floor=1, patience_s=0.1, room=1.0)
    held = await gate.admit()
    assert held is not None
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.01)
    assert await gate.admit() is None  # the line (1 x the limit) is full: refused at once
    assert await waiting is None  # refused after its 0.1 s in line
    assert gate.in_line == 0 and gate.waiting == 1


async def test_a_student_who_leaves_the_line_takes_no_place() -> None:
    gate, _ = admission(initial=1, floor=1, patience_s=5.0)
    held = await gate.admit()
    assert held is not None
    gone = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.01)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert gate.in_line == 0
    held.release()
    assert gate.waiting == 0 and await gate.admit() is not None


# --- through the gateway -----------------------------------------------------------------


@dataclass
class HeldReranker(Responders):
    """Responders whose re-ranker answers only once ``go`` is set (a busy re-ranker)."""

    go: asyncio.Event = field(default_factory=asyncio.Event)
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    async def rerank(self, request: RerankRequest) -> RerankReply:
        self.asked.set()
        await self.go.wait()
        return await super().rerank(request)


@pytest.fixture
async def held(nats_url: str, db_pool: Any) -> AsyncIterator[HeldReranker]:
    responders = HeldReranker(pool=db_pool)
    async with run_responders(nats_url, responders):
        yield responders


@pytest.fixture
async def gateway(nats_url: str, database_url: str, held: HeldReranker) -> AsyncIterator[Gateway]:
    """A gateway whose limit is one waiting turn (a first token later than 50 ms lowers it,
    and it never falls under one), where a question waits in line for 3 s."""
    settings = gateway_settings(
        nats_url,
        database_url,
        admit_first_token_s=0.05,
        admit_initial_turns=1,
        admit_min_turns=1,
        admit_patience_s=3.0,
        offline_answerer_embeddings=False,
    )
    async with serve_gateway(settings) as running:
        yield running


@pytest.mark.integration
async def test_a_question_past_the_limit_gets_503_and_nothing_is_stored_or_counted(
    gateway: Gateway, held: HeldReranker, db_pool: Any, tenant_id: str
) -> None:
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "student-1")
    async with httpx.AsyncClient(timeout=30) as client:
        session = await new_session(client, gateway, headers)
        first = asyncio.create_task(
            ask(client, gateway, session["id"], "What is photosynthesis?", headers)
        )
        await asyncio.wait_for(held.asked.wait(), 10)  # the first turn waits on the re-ranker
        refused = await ask(client, gateway, session["id"], "Where do plants make sugar?", headers)
        assert refused.status == 503
        assert refused.problem is not None and refused.problem["reason"] == "overloaded"
        retry_after = int(refused.headers["retry-after"])
        assert 1 <= retry_after <= RETRY_AFTER_MAX_S
        assert refused.problem["retry_after_s"] == retry_after
        assert refused.headers["content-type"].startswith("application/problem+json")
        # one that waits in line gets the first one's place when its first token comes
        in_line = asyncio.create_task(
            ask(client, gateway, session["id"], "What do plants need for it?", headers)
        )
        await asyncio.sleep(0.1)
        held.go.set()
        answered = await first
        assert (await in_line).status == 200
        assert answered.status == 200 and answered.done.citations
        # its place is free again: the next question is answered
        again = await ask(client, gateway, session["id"], "Where do plants make sugar?", headers)
        assert again.status == 200 and again.done
        # the refused question was neither stored nor counted against the day's limit
        assert again.headers["x-ratelimit-used"] == "3"
        listed = await client.get(
            f"{gateway.url}/v1/sessions/{session['id']}/messages", headers=headers
        )
        asked = [m["content"] for m in listed.json() if m["role"] == "user"]
        assert sorted(asked) == [
            "What do plants need for it?",
            "What is photosynthesis?",
            "Where do plants make sugar?",
        ]


@pytest.mark.integration
async def test_a_retry_with_the_key_of_a_question_in_line_waits_in_line_too(
    gateway: Gateway, held: HeldReranker, db_pool: Any, tenant_id: str
) -> None:
    """A client whose connection dropped while its question waited in line asks again with
    the same ``Idempotency-Key``: the retry takes a place in line of its own. Refused, it gets
    the 503 (not an empty stream of a turn that never started); admitted, it replays the
    turn its first attempt started, which is answered once."""
    await seed_document(db_pool, tenant_id=tenant_id)
    headers = gateway.token(tenant_id, "student-1")
    keyed = {**headers, "Idempotency-Key": "sugar-1"}
    async with httpx.AsyncClient(timeout=30) as client:
        session = await new_session(client, gateway, headers)
        sid = session["id"]
        first = asyncio.create_task(ask(client, gateway, sid, "What is photosynthesis?", headers))
        await asyncio.wait_for(held.asked.wait(), 10)  # the first turn holds the one place
        in_line = asyncio.create_task(ask(client, gateway, sid, "Where is sugar made?", keyed))
        await asyncio.sleep(0.5)
        retry = await ask(client, gateway, sid, "Where is sugar made?", keyed)
        assert (await in_line).status == 503
        assert retry.status == 503, retry.events
        assert retry.problem is not None and retry.problem["reason"] == "overloaded"
        # both in line again; the place comes free: the first attempt is answered, the retry
        # follows that same turn
        in_line = asyncio.create_task(ask(client, gateway, sid, "Where is sugar made?", keyed))
        await asyncio.sleep(0.5)
        retry_task = asyncio.create_task(ask(client, gateway, sid, "Where is sugar made?", keyed))
        await asyncio.sleep(0.5)
        held.go.set()
        assert (await first).status == 200
        asked, retried = await in_line, await retry_task
        assert asked.status == retried.status == 200
        assert retried.headers["x-lectern-turn-id"] == asked.headers["x-lectern-turn-id"]
        assert retried.headers.get("x-lectern-replay") == "true"
        assert asked.done is not None and retried.done is not None
        assert retried.done.message_id == asked.done.message_id
        count = await db_pool.fetchval(
            "SELECT count(*) FROM chat_turns WHERE session_id = $1 AND idempotency_key = $2",
            sid, "sugar-1",
        )  # fmt: skip
        assert count == 1
