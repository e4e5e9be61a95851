"""Ask a question in a session; the answer streams back as typed Server-Sent Events."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from lectern_common import metrics
from lectern_common.db.types import Pool
from lectern_gateway.auth import Principal, PrincipalDep
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.admission import Ticket
from lectern_gateway.chat.lifecycle import session_for
from lectern_gateway.chat.ratelimit import PlanLimits, Verdict, count_message
from lectern_gateway.chat.running_turns import (
    STALE_AFTER_S,
    TurnRegistry,
    event_id,
    parse_last_event_id,
    sse_data,
)
from lectern_gateway.chat.turn_input import ChatSession, TurnInput
from lectern_gateway.config import Settings
from lectern_gateway.deps import BrokerDep, GatewayDep, PoolDep, SettingsDep
from lectern_gateway.personas.service import session_persona
from lectern_gateway.problems import ProblemError
from lectern_gateway.tenant.service import web_search_for

log = logging.getLogger(__name__)

router = APIRouter(tags=["chat"])

_SSE_DOC = """Server-Sent Events; each `event:` name equals the JSON `type` of its `data:`.

- `sources`: `{"type":"sources","sources":[{"label":"T1","chunk_id","document_id","title",
  "page_start","page_end","slide","section","score","answer"}]}` (before any token;
  `answer`, when the re-ranker's reader marked one: `{"start","end","score","null_score"}`,
  the answer's character offsets in the chunk's text and its score against "no answer")
- `token`: `{"type":"token","text":"...","origin":"model"|"gateway"}` (as produced)
- `citation`: `{"type":"citation","citation":{"label":"T1"|"W1","kind":"textbook"|"web",
  "chunk_id","document_id","url","title","span_start","span_end","text","support",
  "supported","valid"}}` (a [T#] when its sentence finishes; a [W#] web source or span)
- `confidence`: `{"type":"confidence","score","band":"high|medium|low|gap","retrieval",
  "source_quality","grounding","grounding_is_prior"}`
- `done`: `{"type":"done","message_id","user_message_id","session_id","citations":[...],
  "unsupported":["T3"],"band","confidence","knowledge_gap","answered_by","usage","timings_ms"}`
- `error`: `{"type":"error","reason","message","retryable"}` (ends the stream)
- `restart`: `{"type":"restart","reason":"takeover","message"}` (a turn taken over by another
  replica that cannot continue it exactly: discard the turn's events before it)
"""


class MessageIn(BaseModel):
    """A question."""

    content: str = Field(min_length=1, max_length=4000, pattern=r"\S", description="not blank")


def plan_limits(settings: Settings, plan: str) -> PlanLimits:
    """The configured limits of a plan."""
    if plan == "pro":
        return PlanLimits(hard=settings.pro_daily_limit)
    return PlanLimits(
        hard=settings.free_hard_limit,
        soft=settings.free_soft_limit,
        delay_s=settings.free_soft_delay_s,
    )


_RESUME_DOC = """

Every event has an SSE `id` `<turn id>:<n>` (the turn id is the question's message id,
`done.user_message_id`; `n` counts from 1). The answer is produced whether or not the client
is still reading (for `LECTERN_GATEWAY_RESUME_GRACE_S` without a reader it is stopped), so a
dropped stream resumes: send the same `Idempotency-Key` again with `Last-Event-ID`, or
`GET` the turn's `events` URL (the response's `Content-Location`). A request repeating an
`Idempotency-Key` of this session is not asked nor counted again: it replays that turn
(unless the turn failed, when the question is asked anew). A turn that fails on the
server's side is not counted against the daily limit. When the replica answering a turn
dies, the replica a client resumes on takes it over after `LECTERN_GATEWAY_TURN_TAKEOVER_S`
(3 s) and continues the stream under the same ids."""


@router.post(
    "/v1/sessions/{session_id}/messages",
    summary="Ask a question; the answer streams as Server-Sent Events",
    description=_SSE_DOC + _RESUME_DOC,
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the event stream"},
        429: {"description": "daily limit reached (problem+json, Retry-After)"},
        503: {
            "description": "overloaded (reason `overloaded`): this replica's turns wait too "
            "long for their first token already, and the question waited in line for a place "
            "(`LECTERN_GATEWAY_ADMIT_PATIENCE_S`) in vain; ask again after `Retry-After` "
            "(nothing was stored or counted). Also a dependency down (NATS, Postgres)."
        },
    },
)
async def post_message(
    session_id: uuid.UUID,
    body: MessageIn,
    request: Request,
    principal: PrincipalDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    gateway: GatewayDep,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="a retry with the same key replays, not re-asks"),
    ] = None,
    last_event_id: Annotated[
        str | None, Header(description="with Idempotency-Key: resume after this event")
    ] = None,
) -> EventSourceResponse:
    started = time.perf_counter()
    session = await session_for(pool=pool, principal=principal, session_id=session_id)
    if session["user_id"] != principal.user_id:
        raise ProblemError(403, "Forbidden", "only the session's owner can ask in it")
    turns = gateway.turns
    turn_id = uuid.uuid4()
    if idempotency_key is not None:
        replayed = await _key_holder(pool, session_id, idempotency_key)
        if replayed is not None:
            after = parse_last_event_id(last_event_id, replayed)
            return _stream(turns, session_id, replayed, after, replay=True)
    if session["status"] != "active":
        raise ProblemError(409, "Conflict", "this session has ended; start a new one")
    admitted = await _admit(turns, pool, settings, principal, session_id, turn_id, idempotency_key)
    if isinstance(admitted, uuid.UUID):  # its first attempt was admitted while this one waited
        after = parse_last_event_id(last_event_id, admitted)
        return _stream(turns, session_id, admitted, after, replay=True)
    ticket, verdict = admitted
    try:
        deps = gateway.chat()
        asked_in = ChatSession.of_row(session)
        persona = await session_persona(
            pool, tenant_id=principal.tenant_id, slug=asked_in.persona_slug,
            version=asked_in.persona_version,
        )  # fmt: skip
        turn = TurnInput(
            principal=principal,
            session=asked_in,
            text=body.content,
            delay_s=verdict.delay_s,
            message_id=turn_id,
            web_search=await web_search_for(pool, principal.tenant_id, default=settings.web_search),
            persona=persona,
            thresholds=None if persona is None else persona.bands(settings.band_thresholds()),
        )
        await turns.start(deps, turn, counted_on=verdict.day, started=started, ticket=ticket)
    except BaseException:
        ticket.release()
        raise
    return _stream(turns, session_id, turn_id, 0, used=verdict.count)


async def _admit(
    turns: TurnRegistry,
    pool: Pool,
    settings: Settings,
    principal: Principal,
    session_id: uuid.UUID,
    turn_id: uuid.UUID,
    key: str | None,
) -> tuple[Ticket, Verdict] | uuid.UUID:
    """A place among the replica's waiting turns (else 503 ``overloaded``), the turn's row
    and the question counted against the plan's daily limit (else 429); nothing is kept of
    a question refused. The row, and with it the Idempotency-Key, is claimed only once
    admitted: a retry with the key while the first attempt waits in line waits in line too,
    and follows the first attempt's turn (its id, returned) if that was admitted meanwhile."""
    ticket = await turns.admission.admit()
    if ticket is None:  # the replica's turns wait too long already: nothing stored or counted
        raise _overloaded(turns.admission.retry_after_s())
    try:
        if key is None:
            await _insert_turn(pool, session_id, None, turn_id, principal)
        elif (replayed := await _claim_key(pool, session_id, key, turn_id, principal)) is not None:
            ticket.release()
            return replayed
        verdict = await count_message(
            pool=pool,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            limits=plan_limits(settings, principal.plan),
        )
    except BaseException:
        ticket.release()
        await _drop_turn(pool, turn_id)
        raise
    if not verdict.allowed:
        ticket.release()
        await _drop_turn(pool, turn_id)
        metrics.RATE_LIMITED.add(1, {"plan": principal.plan})
        raise ProblemError(
            429,
            "Too many requests",
            f"the {principal.plan} plan allows {verdict.count} messages a day",
            headers={"Retry-After": str(verdict.retry_after_s)},
            retry_after_s=verdict.retry_after_s,
        )
    return ticket, verdict


def _overloaded(retry_after_s: int) -> ProblemError:
    """503 for a question the replica cannot take now (its turns wait too long already)."""
    return ProblemError(
        503,
        "Service unavailable",
        "too many questions are being answered right now; ask again in a moment",
        headers={"Retry-After": str(retry_after_s)},
        reason="overloaded",
        retry_after_s=retry_after_s,
    )


@router.get(
    "/v1/sessions/{session_id}/messages/{message_id}/events",
    summary="Resume or replay a turn's answer stream",
    description="The Server-Sent Events of the turn whose question is `message_id`, after "
    "`Last-Event-ID` (a header, or the `after` query parameter): live while it is still "
    "being answered, else from storage. Same events and ids as the `POST` that asked it.",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the event stream"},
        404: {"description": "no such turn in this session"},
    },
)
async def turn_events(
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    principal: PrincipalDep,
    pool: PoolDep,
    gateway: GatewayDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int | None, Query(ge=0)] = None,
) -> EventSourceResponse:
    await session_for(pool=pool, principal=principal, session_id=session_id)
    if not await repo.turn_exists(
        pool=pool, tenant_id=principal.tenant_id, session_id=session_id, turn_id=message_id
    ):
        raise ProblemError(404, "Not found", f"no turn {message_id} in session {session_id}")
    seen = after if after is not None else parse_last_event_id(last_event_id, message_id)
    return _stream(gateway.turns, session_id, message_id, seen, replay=True)


@router.post(
    "/v1/sessions/{session_id}/messages/{message_id}/cancel",
    status_code=202,
    summary="Stop a turn still being answered (its model call stops; nothing is stored)",
    responses={409: {"description": "the turn has ended, or another replica runs it"}},
)
async def cancel_turn(
    session_id: uuid.UUID,
    message_id: uuid.UUID,
    principal: PrincipalDep,
    pool: PoolDep,
    gateway: GatewayDep,
) -> dict[str, str]:
    session = await session_for(pool=pool, principal=principal, session_id=session_id)
    if session["user_id"] != principal.user_id:
        raise ProblemError(403, "Forbidden", "only the session's owner can stop its answers")
    turns = gateway.turns
    if not turns.cancel(message_id):
        raise ProblemError(
            409, "Conflict", "this turn is not being answered here (ended, or on another "
            "replica: it stops by itself when nobody reads it)",
        )  # fmt: skip
    return {"status": "stopping"}


def _stream(
    turns: TurnRegistry,
    session_id: uuid.UUID,
    turn_id: uuid.UUID,
    after: int,
    *,
    used: int | None = None,
    replay: bool = False,
) -> EventSourceResponse:
    headers = {
        "Content-Location": f"/v1/sessions/{session_id}/messages/{turn_id}/events",
        "X-Lectern-Turn-Id": str(turn_id),
    }
    if used is not None:
        headers["X-RateLimit-Used"] = str(used)
    if replay:
        headers["X-Lectern-Replay"] = "true"
    return EventSourceResponse(
        _frames(turns, turn_id, after), ping=15, headers=headers, send_timeout=30
    )


async def _frames(
    turns: TurnRegistry, turn_id: uuid.UUID, after: int
) -> AsyncIterator[ServerSentEvent]:
    async for seq, event in turns.follow(turn_id, after=after):
        yield ServerSentEvent(
            data=sse_data(event), event=str(event.get("type")), id=event_id(turn_id, seq)
        )


async def _insert_turn(
    pool: Pool, session_id: uuid.UUID, key: str | None, turn_id: uuid.UUID, principal: Principal
) -> bool:
    return await repo.insert_turn(
        pool=pool, turn_id=turn_id, session_id=session_id, tenant_id=principal.tenant_id,
        user_id=principal.user_id, idempotency_key=key,
    )  # fmt: skip


async def _claim_key(
    pool: Pool, session_id: uuid.UUID, key: str, turn_id: uuid.UUID, principal: Principal
) -> uuid.UUID | None:
    """Claim ``key`` for a new turn; the turn to replay when another already holds it."""
    for _ in range(3):
        if await _insert_turn(pool, session_id, key, turn_id, principal):
            return None
        held = await _key_holder(pool, session_id, key)
        if held is not None:
            return held
    raise ProblemError(409, "Conflict", "this Idempotency-Key is being used concurrently")


async def _key_holder(pool: Pool, session_id: uuid.UUID, key: str) -> uuid.UUID | None:
    """The turn that holds ``key`` and is answered or being answered; None when none does
    (a failed or abandoned turn, or one whose replica died, gives its key up here)."""
    row = await repo.turn_by_key(pool=pool, session_id=session_id, idempotency_key=key)
    if row is None:
        return None
    lost = row["status"] == "streaming" and float(row["age"]) > STALE_AFTER_S
    if row["status"] in ("streaming", "done") and not lost:
        return uuid.UUID(str(row["id"]))
    await repo.release_turn_key(pool=pool, turn_id=row["id"])
    return None


async def _drop_turn(pool: Pool, turn_id: uuid.UUID) -> None:
    await repo.delete_turn(pool=pool, turn_id=turn_id)
