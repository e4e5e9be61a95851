"""Chat turns that outlive their HTTP connection: numbered events, kept and replayable.

A turn runs as a task of the gateway, not of the request: its events are appended to a
:class:`TurnLog` (numbered 1, 2, ..; the SSE ``id`` is ``<turn id>:<n>``) that any number of
readers follow, and are written to ``chat_turns`` every ``flush_s`` and at the end. So:

- a client whose stream dropped reconnects with ``Last-Event-ID`` (``POST`` again with the
  same ``Idempotency-Key``, or ``GET /v1/sessions/{id}/messages/{turn id}/events``) and gets
  the events after that one, on this replica from memory, on another from Postgres;
- a turn nobody reads is cancelled after ``resume_grace_s`` (its model call with it);
- a turn that failed on the server's side gives back its place in the daily limit.

The turn's id is the question's message id (``done.user_message_id``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import anyio
from pydantic import BaseModel

from lectern_common import metrics
from lectern_common.errors import LecternError, RetryableError
from lectern_gateway.chat.service import run_turn
from lectern_gateway.chat.sse import ErrorEvent
from lectern_gateway.chat.turn import ChatDeps, TurnInput
from lectern_gateway.problems import DATABASE_UNAVAILABLE

log = logging.getLogger(__name__)

#: a turn stored as streaming whose row was not touched for this long lost its replica
STALE_AFTER_S = 30.0

_APPEND = """
UPDATE chat_turns SET events = events || $2::jsonb, status = $3, updated_at = now()
WHERE id = $1
"""
_REFUND = """
UPDATE usage_counters SET messages = messages - 1
WHERE tenant_id = $1 AND user_id = $2 AND day = $3 AND messages > 0
"""


@dataclass
class TurnLog:
    """One turn's events so far, and whether it has ended."""

    turn_id: uuid.UUID
    events: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    readers: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None
    flushed: int = 0


def event_id(turn_id: uuid.UUID, seq: int) -> str:
    """The SSE ``id`` of a turn's ``seq``-th event."""
    return f"{turn_id}:{seq}"


def parse_last_event_id(value: str | None, turn_id: uuid.UUID) -> int:
    """The number of the last event a client saw of this turn (0: none, or another turn's)."""
    if not value:
        return 0
    turn, _, seq = value.strip().rpartition(":")
    if turn and turn != str(turn_id):
        return 0
    try:
        return max(0, int(seq))
    except ValueError:
        return 0


def _status(events: list[dict[str, Any]], finished: bool) -> str:
    if not finished:
        return "streaming"
    last = events[-1] if events else {}
    if last.get("type") == "done":
        return "done"
    return "abandoned" if last.get("reason") == "abandoned" else "failed"


class TurnRegistry:
    """The turns this replica is running, and the readers following them."""

    def __init__(
        self,
        *,
        pool: Any,
        flush_s: float = 0.5,
        resume_grace_s: float = 30.0,
        keep_s: float = 60.0,
        poll_s: float = 0.25,
    ) -> None:
        self.pool = pool
        self.flush_s = flush_s
        self.resume_grace_s = resume_grace_s
        self.keep_s = keep_s
        self.poll_s = poll_s
        self.turns: dict[uuid.UUID, TurnLog] = {}

    def start(
        self, deps: ChatDeps, turn: TurnInput, *, counted_on: date | None, started: float
    ) -> TurnLog:
        """Run a turn in the background; ``turn.message_id`` is its id."""
        assert turn.message_id is not None
        log_ = TurnLog(turn_id=turn.message_id)
        self.turns[log_.turn_id] = log_
        log_.task = asyncio.create_task(
            self._drive(log_, deps, turn, counted_on=counted_on, started=started),
            name=f"chat-turn-{log_.turn_id}",
        )
        return log_

    def cancel(self, turn_id: uuid.UUID) -> bool:
        """Stop a turn this replica runs (the student pressed Stop); False if not running."""
        local = self.turns.get(turn_id)
        if local is None or local.finished or local.task is None:
            return False
        local.task.cancel()
        return True

    async def stop(self) -> None:
        """Cancel the turns still running (the gateway is stopping)."""
        tasks = [t.task for t in self.turns.values() if t.task is not None and not t.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def follow(
        self, turn_id: uuid.UUID, *, after: int = 0
    ) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """The turn's events numbered above ``after``, as they come, until its last one."""
        local = self.turns.get(turn_id)
        if local is None:
            async for item in self._follow_stored(turn_id, after=after):
                yield item
            return
        local.readers += 1
        metrics.STREAMS_IN_FLIGHT.add(1)
        try:
            sent = after
            while True:
                async with local.changed:
                    while len(local.events) <= sent and not local.finished:
                        await local.changed.wait()
                    fresh = local.events[sent:]
                    finished = local.finished
                for event in fresh:
                    sent += 1
                    yield sent, event
                if finished and sent >= len(local.events):
                    return
        finally:
            local.readers -= 1
            metrics.STREAMS_IN_FLIGHT.add(-1)
            if local.readers == 0 and not local.finished:
                asyncio.get_running_loop().call_later(
                    self.resume_grace_s, self._abandon_if_unread, local
                )

    async def _follow_stored(
        self, turn_id: uuid.UUID, *, after: int
    ) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """Follow a turn another replica runs (or ran) through its ``chat_turns`` row."""
        sent = after
        metrics.STREAMS_IN_FLIGHT.add(1)
        try:
            while True:
                row = await self.pool.fetchrow(
                    "SELECT status, events, extract(epoch FROM now() - updated_at) AS age "
                    "FROM chat_turns WHERE id = $1",
                    turn_id,
                )
                if row is None:
                    return
                events = list(row["events"])
                for event in events[sent:]:
                    sent += 1
                    yield sent, event
                if row["status"] != "streaming":
                    return
                if float(row["age"]) > STALE_AFTER_S:
                    lost = ErrorEvent(
                        reason="interrupted",
                        message="the replica answering this question stopped; ask again",
                        retryable=True,
                    )
                    yield sent + 1, lost.model_dump(mode="json")
                    return
                await asyncio.sleep(self.poll_s)
        finally:
            metrics.STREAMS_IN_FLIGHT.add(-1)

    def _abandon_if_unread(self, local: TurnLog) -> None:
        if local.readers == 0 and not local.finished and local.task is not None:
            log.info("turn %s: no reader for %.0f s; stopping it", local.turn_id,
                     self.resume_grace_s)  # fmt: skip
            local.task.cancel()

    async def _drive(
        self,
        local: TurnLog,
        deps: ChatDeps,
        turn: TurnInput,
        *,
        counted_on: date | None,
        started: float,
    ) -> None:
        flusher = asyncio.create_task(self._flush_every(local))
        first_token = True
        try:
            async for event in _guarded(run_turn(deps, turn)):
                if first_token and getattr(event, "type", None) == "token":
                    first_token = False
                    metrics.TIME_TO_FIRST_TOKEN.record(time.perf_counter() - started)
                _observe_end(event, started)
                await self._append(local, event)
        except asyncio.CancelledError:
            abandoned = ErrorEvent(
                reason="abandoned",
                message="the answer was stopped (by the student, or nobody was reading it)",
                retryable=True,
            )
            await self._append(local, abandoned)
        finally:
            flusher.cancel()
            async with local.changed:
                local.finished = True
                local.changed.notify_all()
            with anyio.CancelScope(shield=True):
                await self._final_flush(local, turn, counted_on)
            asyncio.get_running_loop().call_later(self.keep_s, self.turns.pop, local.turn_id, None)

    async def _append(self, local: TurnLog, event: BaseModel) -> None:
        async with local.changed:
            local.events.append(event.model_dump(mode="json"))
            local.changed.notify_all()

    async def _flush_every(self, local: TurnLog) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            try:
                await self._flush(local, status="streaming")
            except Exception as exc:  # the final flush tries again
                log.debug("turn %s: flush failed: %s", local.turn_id, exc)

    async def _flush(self, local: TurnLog, *, status: str) -> None:
        upto = len(local.events)
        fresh = local.events[local.flushed : upto]
        if not fresh and status == "streaming":
            await self.pool.execute(
                "UPDATE chat_turns SET updated_at = now() WHERE id = $1", local.turn_id
            )
            return
        await self.pool.execute(_APPEND, local.turn_id, fresh, status)
        local.flushed = upto

    async def _final_flush(self, local: TurnLog, turn: TurnInput, counted_on: date | None) -> None:
        status = _status(local.events, True)
        for attempt in range(3):
            try:
                await self._flush(local, status=status)
                if status == "failed" and counted_on is not None:
                    # the server failed the student: the question does not count
                    principal = turn.principal
                    await self.pool.execute(
                        _REFUND, principal.tenant_id, principal.user_id, counted_on
                    )
                return
            except Exception as exc:
                log.warning("turn %s: storing its events failed (%s)", local.turn_id, exc)
                await asyncio.sleep(0.5 * (attempt + 1))


def _observe_end(event: BaseModel, started: float) -> None:
    kind = getattr(event, "type", None)
    if kind == "done":
        band = str(getattr(event, "band", ""))
        answered_by = str(getattr(event, "answered_by", ""))
        metrics.ANSWERS.add(1, {"band": band, "answered_by": answered_by})
        metrics.ANSWER_DURATION.record(time.perf_counter() - started, {"band": band})
        if getattr(event, "knowledge_gap", False):
            metrics.KNOWLEDGE_GAPS.add(1)
    elif kind == "error":
        metrics.TURN_FAILURES.add(1, {"reason": str(getattr(event, "reason", ""))})


async def _guarded(events: Any) -> AsyncIterator[BaseModel]:
    """The turn's events; an exception becomes a final ``error`` event."""
    try:
        async for event in events:
            yield event
    except LecternError as exc:
        log.warning("chat turn failed: %s", exc.message)
        yield ErrorEvent(
            reason=exc.reason, message=exc.message, retryable=isinstance(exc, RetryableError)
        )
    except DATABASE_UNAVAILABLE as exc:
        log.warning("chat turn failed: Postgres unavailable (%s)", type(exc).__name__)
        yield ErrorEvent(
            reason="database_unavailable",
            message="the database is unavailable; retry shortly",
            retryable=True,
        )
    except Exception as exc:
        log.exception("chat turn failed")
        yield ErrorEvent(reason="internal", message=str(exc) or type(exc).__name__)
    finally:
        # closes the turn (and its model call) when it is cancelled
        with anyio.CancelScope(shield=True):
            await events.aclose()


def sse_data(event: dict[str, Any]) -> str:
    """The ``data:`` of a stored event."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))
