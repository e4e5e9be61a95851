"""Chat turns that outlive their HTTP connection: numbered events, kept and replayable.

A turn runs as a task of the gateway, not of the request: its events are appended to a
:class:`TurnLog` (numbered 1, 2, ..; the SSE ``id`` is ``<turn id>:<n>``) that any number of
readers follow, and are written to ``chat_turns`` every ``flush_s`` and at the end. So:

- a client whose stream dropped reconnects with ``Last-Event-ID`` (``POST`` again with the
  same ``Idempotency-Key``, or ``GET /v1/sessions/{id}/messages/{turn id}/events``) and gets
  the events after that one, on this replica from memory, on another from Postgres;
- a turn nobody reads is cancelled after ``resume_grace_s`` (its model call with it);
- a turn that failed on the server's side gives back its place in the daily limit;
- a turn whose replica died (its row not written for ``takeover_s``) is taken over by the
  replica a client resumes on: claimed atomically (one replica wins), answered again from
  the inputs kept in its row, and continued after the events stored so far. A deterministic
  answerer (the offline one) gives the same events again, so the stream goes on exactly;
  otherwise, or when the re-run differs from what was stored, a ``restart`` event tells the
  client to discard the turn's events before it (numbered after every id the resuming client
  had, so ids only grow). Every write of a run is fenced on its ``owner`` token, so a
  replica thought dead that wakes up stores nothing.

The turn's id is the question's message id (``done.user_message_id``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import anyio
from pydantic import BaseModel

from lectern_common import metrics
from lectern_common.db.types import Pool
from lectern_common.education import BandThresholds
from lectern_common.errors import LecternError, RetryableError
from lectern_gateway.auth import Principal
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.admission import Admission, Ticket
from lectern_gateway.chat.service import run_turn
from lectern_gateway.chat.sse import ErrorEvent, RestartEvent
from lectern_gateway.chat.turn_input import ChatDeps, ChatSession, TurnInput, TurnTakenOver
from lectern_gateway.personas.service import session_persona
from lectern_gateway.problems import unavailable

log = logging.getLogger(__name__)

#: a turn stored as streaming whose row was not touched for this long lost its replica
STALE_AFTER_S = 30.0

#: events that carry the answer: a re-run must repeat them exactly to continue the stream
_COMPARED = frozenset({"sources", "token", "citation", "check"})
#: kept in a restarted turn's place for the ids a client may have been sent by the replica that
#: died and that it never stored: the ``restart`` follows them, so ids only grow (never sent)
_HOLE = "hole"


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
    #: this run's token (``chat_turns.owner``): its writes count only while it owns the turn
    owner: uuid.UUID = field(default_factory=uuid.uuid4)
    #: taken over from a run that died, which had stored events 1..base
    taken_over: bool = False
    base: int = 0
    #: a take-over that restarted the answer (a ``restart`` event after every id a reader had)
    restarted: bool = False
    #: the highest event id a reader of the take-over had seen when it came
    ahead: int = 0
    #: another replica took the turn over from this run: it stops and writes nothing
    superseded: bool = False
    #: one flush of the turn at a time (``TurnRegistry._flush``)
    flushing: asyncio.Lock = field(default_factory=asyncio.Lock)


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
        pool: Pool,
        flush_s: float = 0.5,
        resume_grace_s: float = 30.0,
        keep_s: float = 60.0,
        poll_s: float = 0.25,
        takeover_s: float = 3.0,
        deps: Callable[[], ChatDeps] | None = None,
        exact_rerun: bool = False,
        admission: Admission | None = None,
    ) -> None:
        self.pool = pool
        self.flush_s = flush_s
        self.resume_grace_s = resume_grace_s
        self.keep_s = keep_s
        self.poll_s = poll_s
        self.takeover_s = takeover_s
        #: what a turn taken over is answered with (None: this registry takes none over)
        self.deps = deps
        #: the answerer gives the same events for the same inputs (the offline one)
        self.exact_rerun = exact_rerun
        #: the limit on this replica's turns waiting for their first token (overload)
        self.admission = admission or Admission(target_s=0.0)
        self.turns: dict[uuid.UUID, TurnLog] = {}

    async def start(
        self,
        deps: ChatDeps,
        turn: TurnInput,
        *,
        counted_on: date | None,
        started: float,
        ticket: Ticket | None = None,
    ) -> TurnLog:
        """Own the turn's row (with what another replica needs to take it over) and run the
        turn in the background; ``turn.message_id`` is its id. ``ticket``: its admission,
        given back at its first token."""
        assert turn.message_id is not None
        log_ = TurnLog(turn_id=turn.message_id)
        turn.owner = log_.owner
        try:
            await repo.own_turn(
                pool=self.pool, turn_id=log_.turn_id, counted_on=counted_on, owner=log_.owner,
                inputs=turn_inputs(turn),
            )  # fmt: skip
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise
        drive = self._drive(log_, deps, turn, counted_on=counted_on, started=started, ticket=ticket)
        self._run(log_, drive)
        return log_

    def _run(self, log_: TurnLog, drive: Coroutine[Any, Any, None]) -> None:
        """Keep the turn's log and run ``drive`` (its ``_drive``) as the turn's task."""
        self.turns[log_.turn_id] = log_
        log_.task = asyncio.create_task(drive, name=f"chat-turn-{log_.turn_id}")

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
        async for item in self._follow_local(local, after=after):
            yield item

    async def _follow_local(
        self, local: TurnLog, *, after: int
    ) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        local.readers += 1
        metrics.STREAMS_IN_FLIGHT.add(1)
        try:
            sent = after
            if local.taken_over and not local.restarted:
                # a client past the stored events got them from the run that died: a restart
                # comes after them
                local.ahead = max(local.ahead, after)
            while True:
                async with local.changed:
                    while len(local.events) <= sent and not local.finished:
                        await local.changed.wait()
                    fresh = local.events[sent:]
                    finished = local.finished
                for event in fresh:
                    sent += 1
                    if event.get("type") != _HOLE:
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
        """Follow a turn another replica runs (or ran) through its ``chat_turns`` row; take
        it over when that replica stopped writing it."""
        sent = after
        local: TurnLog | None = None
        async for item in self._poll_stored(turn_id, after=after):
            if isinstance(item, TurnLog):
                local = item
                break
            sent = item[0]
            yield item
        if local is not None:  # this replica answers it now
            async for item in self._follow_local(local, after=sent):
                yield item

    async def _poll_stored(
        self, turn_id: uuid.UUID, *, after: int
    ) -> AsyncIterator[tuple[int, dict[str, Any]] | TurnLog]:
        sent = after
        metrics.STREAMS_IN_FLIGHT.add(1)
        try:
            while True:
                row = await repo.stored_turn(pool=self.pool, turn_id=turn_id)
                if row is None:
                    return
                events = list(row["events"])
                for event in events[sent:]:
                    sent += 1
                    if event.get("type") != _HOLE:
                        yield sent, event
                if row["status"] != "streaming":
                    return
                age = float(row["age"])
                local = self.turns.get(turn_id)
                if local is None and self.takeover_s < age <= STALE_AFTER_S:
                    local = await self._take_over(turn_id)
                if local is not None:
                    yield local
                    return
                if age > STALE_AFTER_S:
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

    async def _take_over(self, turn_id: uuid.UUID) -> TurnLog | None:
        """Claim a turn whose replica stopped writing its row and answer it again here;
        None when another replica claimed it first (or this one takes none over)."""
        if self.deps is None:
            return None
        local = TurnLog(turn_id=turn_id)
        row = await repo.claim_stale_turn(
            pool=self.pool, turn_id=turn_id, owner=local.owner, stale_s=self.takeover_s
        )
        if row is None:
            return None
        deps = self.deps()
        turn = await resumed_turn(deps.pool, dict(row), turn_id=turn_id, owner=local.owner)
        stored = list(row["events"])
        local.events, local.flushed, local.base = list(stored), len(stored), len(stored)
        local.taken_over = True
        log.info("turn %s: its replica stopped; taken over after %d stored events",
                 turn_id, len(stored))  # fmt: skip
        if turn is None:  # the session is gone: nothing to answer
            local.finished = True
            return local
        drive = self._drive(
            local, deps, turn, counted_on=row["counted_on"], started=time.perf_counter(),
            stored=stored,
        )  # fmt: skip
        self._run(local, drive)
        return local

    async def _drive(
        self,
        local: TurnLog,
        deps: ChatDeps,
        turn: TurnInput,
        *,
        counted_on: date | None,
        started: float,
        stored: list[dict[str, Any]] | None = None,
        ticket: Ticket | None = None,
    ) -> None:
        flusher = asyncio.create_task(self._flush_every(local))
        first_token = True
        rerun = _Rerun(stored, exact=self.exact_rerun) if stored is not None else None
        try:
            async for event in _guarded(run_turn(deps, turn)):
                if first_token and getattr(event, "type", None) == "token":
                    first_token = False
                    metrics.TIME_TO_FIRST_TOKEN.record(time.perf_counter() - started)
                    if ticket is not None:  # its wait, less the plan's deliberate pacing
                        ticket.settle(less_s=turn.delay_s)
                _observe_end(event, started)
                data = event.model_dump(mode="json")
                if rerun is None:
                    await self._append(local, [data])
                    continue
                fresh = rerun.step(data)
                if rerun.restarted and not local.restarted:
                    local.restarted = True
                    holes = max(0, local.ahead - len(local.events))
                    fresh = [{"type": _HOLE} for _ in range(holes)] + fresh
                    log.info("turn %s: its re-run may differ from what was sent; restarting "
                             "the answer", local.turn_id)  # fmt: skip
                await self._append(local, fresh)
        except TurnTakenOver:
            local.superseded = True
        except asyncio.CancelledError:
            if ticket is not None:  # stopped: no measure of the stack's wait
                ticket.release()
            if not local.superseded:
                abandoned = ErrorEvent(
                    reason="abandoned",
                    message="the answer was stopped (by the student, or nobody was reading it)",
                    retryable=True,
                )
                await self._append(local, [abandoned.model_dump(mode="json")])
        finally:
            if ticket is not None and local.superseded:
                ticket.release()
            elif ticket is not None:  # ended before a token (an error): what it waited
                ticket.settle(less_s=turn.delay_s)
            flusher.cancel()
            async with local.changed:
                local.finished = True
                local.changed.notify_all()
            if local.superseded:
                # another replica answers the turn now: readers here reconnect to it
                log.warning("turn %s: taken over by another replica; stopped here",
                            local.turn_id)  # fmt: skip
                if self.turns.get(local.turn_id) is local:
                    del self.turns[local.turn_id]
            else:
                with anyio.CancelScope(shield=True):
                    await self._final_flush(local, turn, counted_on)
                asyncio.get_running_loop().call_later(self.keep_s, self._forget, local)

    def _forget(self, local: TurnLog) -> None:
        if self.turns.get(local.turn_id) is local:
            del self.turns[local.turn_id]

    async def _append(self, local: TurnLog, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        async with local.changed:
            local.events.extend(events)
            local.changed.notify_all()

    async def _flush_every(self, local: TurnLog) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            try:
                owned = await self._flush(local, status="streaming")
            except Exception as exc:  # the final flush tries again
                log.debug("turn %s: flush failed: %s", local.turn_id, exc)
                continue
            if not owned and local.task is not None:
                local.superseded = True
                local.task.cancel()
                return

    async def _flush(self, local: TurnLog, *, status: str) -> bool:
        """Write the events not yet stored; False when another run owns the turn now.

        A flush runs whole, one at a time, even when its caller is cancelled: the periodic
        flusher is cancelled as the turn ends, and a write it had sent still lands. Had the
        final flush not waited for it and seen how far it stored, it would have stored the
        same events again (seen under load in the take-over test: a restarted answer stored
        twice over)."""
        whole = asyncio.ensure_future(self._flush_whole(local, status=status))
        whole.add_done_callback(_failure_seen)  # its caller may be gone: logged, not lost
        return await asyncio.shield(whole)

    async def _flush_whole(self, local: TurnLog, *, status: str) -> bool:
        async with local.flushing:
            upto = len(local.events)
            fresh = local.events[local.flushed : upto]
            if not fresh and status == "streaming":
                return await repo.touch_turn(
                    pool=self.pool, turn_id=local.turn_id, owner=local.owner
                )
            if not await repo.append_turn_events(
                pool=self.pool, turn_id=local.turn_id, events=fresh, status=status,
                owner=local.owner,
            ):  # fmt: skip
                return False
            local.flushed = upto
            return True

    async def _final_flush(self, local: TurnLog, turn: TurnInput, counted_on: date | None) -> None:
        status = _status(local.events, True)
        for attempt in range(3):
            try:
                if not await self._flush(local, status=status):
                    return  # another run owns the turn: it stores and refunds
                if status == "failed" and counted_on is not None:
                    # the server failed the student: the question does not count
                    principal = turn.principal
                    await repo.refund_message(
                        pool=self.pool, tenant_id=principal.tenant_id,
                        user_id=principal.user_id, day=counted_on,
                    )  # fmt: skip
                return
            except Exception as exc:
                log.warning("turn %s: storing its events failed (%s)", local.turn_id, exc)
                await asyncio.sleep(0.5 * (attempt + 1))


def _failure_seen(flush: asyncio.Future[bool]) -> None:
    """A flush's failure, retrieved (asyncio would report a flush whose caller was cancelled
    as an ERROR "never retrieved"): the final flush tries again."""
    if not flush.cancelled() and (exc := flush.exception()) is not None:
        log.debug("turn flush failed: %s", exc)


class _Rerun:
    """A taken-over turn answered again: which of its events go on the stream.

    The events already stored are not sent again. With an exact answerer each re-run event
    up to their number is compared with the stored one (the answer's events, not timings);
    while they agree the stream continues after them. A difference, or an answerer that
    cannot promise the same text, restarts the answer: a ``restart`` event, then every
    event of the re-run (the caller numbers the restart after the ids readers had)."""

    def __init__(self, stored: list[dict[str, Any]], *, exact: bool) -> None:
        self.stored = stored
        self.seen: list[dict[str, Any]] = []
        self.restarted = False
        self.exact = exact

    def step(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events to append for the re-run's next ``event``."""
        self.seen.append(event)
        if self.restarted:
            return [event]
        index = len(self.seen) - 1
        if self.exact and index >= len(self.stored):
            return [event]
        if self.exact and _same(self.stored[index], event):
            return []  # the client has it already
        self.restarted = True
        restart = RestartEvent(
            message="another replica took this answer over and answers it again from its "
            "start; discard what this turn sent before"
        )
        return [restart.model_dump(mode="json"), *self.seen]


def _same(stored: dict[str, Any], rerun: dict[str, Any]) -> bool:
    if stored.get("type") != rerun.get("type"):
        return False
    return stored.get("type") not in _COMPARED or stored == rerun


def turn_inputs(turn: TurnInput) -> dict[str, Any]:
    """What another replica needs, besides the session, to answer the turn again."""
    principal = turn.principal
    return {
        "principal": {
            "tenant_id": principal.tenant_id, "user_id": principal.user_id,
            "role": principal.role, "plan": principal.plan, "classes": list(principal.classes),
        },
        "text": turn.text,
        "web_search": turn.web_search,
        "thresholds": None if turn.thresholds is None else dataclasses.asdict(turn.thresholds),
    }  # fmt: skip


async def resumed_turn(
    pool: Pool, row: dict[str, Any], *, turn_id: uuid.UUID, owner: uuid.UUID
) -> TurnInput | None:
    """The turn of a claimed row, to answer again (None: its session is gone)."""
    inputs = row["inputs"]
    who = inputs["principal"]
    principal = Principal(
        tenant_id=who["tenant_id"], user_id=who["user_id"], role=who["role"], plan=who["plan"],
        classes=tuple(who["classes"]),
    )  # fmt: skip
    session = await repo.get_session(
        pool=pool, tenant_id=row["tenant_id"], session_id=row["session_id"]
    )
    if session is None:
        return None
    asked_in = ChatSession.of_row(session)
    persona = await session_persona(
        pool, tenant_id=principal.tenant_id, slug=asked_in.persona_slug,
        version=asked_in.persona_version,
    )  # fmt: skip
    cuts = inputs.get("thresholds")
    return TurnInput(
        principal=principal,
        session=asked_in,
        text=inputs["text"],
        message_id=turn_id,
        web_search=bool(inputs.get("web_search")),
        persona=persona,
        thresholds=None if cuts is None else BandThresholds(**cuts),
        owner=owner,
        resumed=True,
    )


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
    except TurnTakenOver:
        raise
    except Exception as exc:
        # the reasons of the HTTP answers: a dependency that failed for now (NATS, Postgres,
        # another service) by its name and retryable, anything else as it is
        cause = unavailable(exc)
        if cause is not None:
            log.warning("chat turn failed: %s (%s)", cause.reason, cause.detail)
            yield ErrorEvent(reason=cause.reason, message=cause.detail, retryable=True)
        elif isinstance(exc, LecternError):
            log.warning("chat turn failed: %s", exc.message)
            yield ErrorEvent(
                reason=exc.reason, message=exc.message, retryable=isinstance(exc, RetryableError)
            )
        else:
            log.exception("chat turn failed")
            yield ErrorEvent(reason="internal", message=str(exc) or type(exc).__name__)
    finally:
        # closes the turn (and its model call) when it is cancelled
        with anyio.CancelScope(shield=True):
            await events.aclose()


def sse_data(event: dict[str, Any]) -> str:
    """The ``data:`` of a stored event."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))
