"""Ask a question in a session; the answer streams back as typed Server-Sent Events."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from lectern_common.errors import LecternError, RetryableError
from lectern_gateway.auth import PrincipalDep
from lectern_gateway.chat.ratelimit import PlanLimits, count_message
from lectern_gateway.chat.runtime import STREAMER
from lectern_gateway.chat.service import run_turn
from lectern_gateway.chat.sse import ErrorEvent, to_sse
from lectern_gateway.chat.turn import ChatDeps, TurnInput
from lectern_gateway.config import Settings
from lectern_gateway.deps import BrokerDep, PoolDep, SettingsDep, StateDep
from lectern_gateway.problems import DATABASE_UNAVAILABLE, ProblemError
from lectern_gateway.sessions.routes import session_for

log = logging.getLogger(__name__)

router = APIRouter(tags=["chat"])

_SSE_DOC = """Server-Sent Events; each `event:` name equals the JSON `type` of its `data:`.

- `sources`: `{"type":"sources","sources":[{"label":"T1","chunk_id","document_id","title",
  "page_start","page_end","slide","section","score"}]}` (before any token)
- `token`: `{"type":"token","text":"...","origin":"model"|"gateway"}` (as produced)
- `citation`: `{"type":"citation","citation":{"label":"T1"|"W1","kind":"textbook"|"web",
  "chunk_id","document_id","url","title","span_start","span_end","text","support",
  "supported","valid"}}` (a [T#] when its sentence finishes; a [W#] web source or span)
- `confidence`: `{"type":"confidence","score","band":"high|medium|low|gap","retrieval",
  "source_quality","grounding","grounding_is_prior"}`
- `done`: `{"type":"done","message_id","user_message_id","session_id","citations":[...],
  "unsupported":["T3"],"band","confidence","knowledge_gap","answered_by","usage","timings_ms"}`
- `error`: `{"type":"error","reason","message","retryable"}` (ends the stream)
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


@router.post(
    "/v1/sessions/{session_id}/messages",
    summary="Ask a question; the answer streams as Server-Sent Events",
    description=_SSE_DOC,
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the event stream"},
        429: {"description": "daily limit reached (problem+json, Retry-After)"},
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
    state: StateDep,
) -> EventSourceResponse:
    session = await session_for(pool=pool, principal=principal, session_id=session_id)
    if session["user_id"] != principal.user_id:
        raise ProblemError(403, "Forbidden", "only the session's owner can ask in it")
    if session["status"] != "active":
        raise ProblemError(409, "Conflict", "this session has ended; start a new one")
    verdict = await count_message(
        pool=pool,
        tenant_id=principal.tenant_id,
        user_id=principal.user_id,
        limits=plan_limits(settings, principal.plan),
    )
    if not verdict.allowed:
        raise ProblemError(
            429,
            "Too many requests",
            f"the {principal.plan} plan allows {verdict.count} messages a day",
            headers={"Retry-After": str(verdict.retry_after_s)},
            retry_after_s=verdict.retry_after_s,
        )
    deps = ChatDeps(
        pool=pool,
        broker=broker,
        settings=settings,
        streamer=state.resources[STREAMER],
    )
    turn = TurnInput(
        principal=principal, session=session, text=body.content, delay_s=verdict.delay_s
    )
    headers = {"X-RateLimit-Used": str(verdict.count)}
    return EventSourceResponse(_events(deps, turn), ping=15, headers=headers, send_timeout=30)


async def _events(deps: ChatDeps, turn: TurnInput) -> AsyncIterator[ServerSentEvent]:
    events = run_turn(deps, turn)
    try:
        async for event in events:
            yield to_sse(event)
    except LecternError as exc:
        log.warning("chat turn failed: %s", exc.message)
        yield to_sse(
            ErrorEvent(
                reason=exc.reason, message=exc.message, retryable=isinstance(exc, RetryableError)
            )
        )
    except DATABASE_UNAVAILABLE as exc:
        log.warning("chat turn failed: Postgres unavailable (%s)", type(exc).__name__)
        yield to_sse(
            ErrorEvent(
                reason="database_unavailable",
                message="the database is unavailable; retry shortly",
                retryable=True,
            )
        )
    except Exception as exc:
        log.exception("chat turn failed")
        yield to_sse(ErrorEvent(reason="internal", message=str(exc) or type(exc).__name__))
    finally:
        # on a client disconnect sse-starlette cancels us; close the turn (and its model call)
        # shielded so the close itself is not cancelled half-way
        with anyio.CancelScope(shield=True):
            await events.aclose()
