"""Closing knowledge gaps: re-try the questions the material could not answer.

A teacher who uploaded material for a gap topic re-tries its open questions, at once or, by
naming the document (a closure), as soon as that document is indexed (``run_closures``, swept
by the gateway). Each is
retrieved and re-ranked exactly as the student's chat would (their classes, the session's
subject and class); when the material now answers it, the student gets a new session in
which the question is asked again on their behalf and answered through the real chat turn
(sources, citations, confidence), a notice saying so, and the gap is marked answered. A
question still without material stays open and records when it was re-tried.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from lectern_common.errors import LecternError
from lectern_gateway.auth import Principal
from lectern_gateway.chat import repository as chat_repo
from lectern_gateway.chat.retrieve import Lookup, retrieve_sources
from lectern_gateway.chat.service import run_turn
from lectern_gateway.chat.sse import DoneEvent, ErrorEvent
from lectern_gateway.chat.turn_input import ChatDeps, ChatSession, TurnInput
from lectern_gateway.review import repository as repo

log = logging.getLogger(__name__)


@dataclass
class Retried:
    """The outcome of one re-tried question."""

    gap_id: uuid.UUID
    question: str
    user_id: str
    outcome: str  # answered | still_gap | failed
    band: str | None = None
    session_id: uuid.UUID | None = None
    document_id: uuid.UUID | None = None
    message: str | None = None


def _student(tenant_id: str, user_id: str) -> Principal:
    # the classes come from the rosters teachers keep (the token's claim is not stored)
    return Principal(tenant_id=tenant_id, user_id=user_id, role="student")


def _session_like(gap: Any) -> ChatSession:
    return ChatSession(
        id=gap["session_id"] or uuid.uuid4(), mode="chat", subject=gap["session_subject"],
        module_tag=gap["module_tag"], class_id=gap["class_id"], grade_level=gap["session_grade"],
    )  # fmt: skip


async def retry_gap(deps: ChatDeps, gap: Any) -> Retried:
    """Re-try one gap question; answer it in a new session when the material now can."""
    tenant_id, user_id = gap["tenant_id"], gap["user_id"]
    student = _student(tenant_id, user_id)
    found = Retried(gap_id=gap["id"], question=gap["question"], user_id=user_id, outcome="failed")
    try:
        lookup = Lookup(principal=student, session=_session_like(gap), query=gap["question"])
        retrieved = await retrieve_sources(deps, lookup, timings={})
    except LecternError as exc:
        found.message = exc.message
        return found
    found.band = retrieved.confidence.band
    if not retrieved.sources or retrieved.confidence.band == "gap":
        await repo.mark_gap_retried(pool=deps.pool, gap_id=gap["id"])
        found.outcome = "still_gap"
        return found
    session = await chat_repo.insert_session(
        pool=deps.pool,
        values={
            "id": uuid.uuid4(), "tenant_id": tenant_id, "user_id": user_id, "mode": "chat",
            "subject": gap["session_subject"], "module_tag": gap["module_tag"],
            "class_id": gap["class_id"], "grade_level": gap["session_grade"],
            "learning_style": None, "explanation_depth": None,
            "title": f"Answered later: {gap['question'][:80]}",
            "curriculum_standards": [], "persona_slug": None, "persona_version": None,
        },
    )  # fmt: skip
    done: DoneEvent | None = None
    asked = TurnInput(principal=student, session=ChatSession.of_row(session), text=gap["question"])
    async for event in run_turn(deps, asked):
        if isinstance(event, DoneEvent):
            done = event
        elif isinstance(event, ErrorEvent):
            found.message = event.message
    found.session_id = session["id"]
    if done is None or done.knowledge_gap:
        # the answer turn itself judged the material insufficient after all
        found.outcome = "still_gap" if done is not None else "failed"
        found.band = done.band if done is not None else found.band
        await repo.mark_gap_retried(pool=deps.pool, gap_id=gap["id"])
        return found
    cited = [c.document_id for c in done.citations if c.document_id is not None]
    found.document_id = cited[0] if cited else retrieved.sources[0].document_id
    found.band, found.outcome = done.band, "answered"
    async with deps.pool.acquire() as conn, conn.transaction():
        await repo.answer_gaps(
            pool=conn, tenant_id=tenant_id, user_id=user_id, question=gap["question"],
            session_id=session["id"], document_id=found.document_id,
        )  # fmt: skip
        await repo.insert_gap_notice(
            pool=conn, tenant_id=tenant_id, user_id=user_id,
            text=f'Your question "{gap["question"][:200]}" can now be answered from your '
            "course material: the answer is in a new session.",
            session_id=session["id"], gap_id=gap["id"],
        )  # fmt: skip
    return found


#: a closure left running this long (a gateway stopped mid-way) is taken up again
STALE_RUN_S = 600


async def run_closures(deps: ChatDeps, *, limit: int = 5) -> int:
    """Re-try the gap topics whose closing document is now indexed; returns how many ran.

    Claimed with ``SKIP LOCKED``, so any number of gateway replicas sweep without running one
    twice. A document that failed ends its closure ``failed``; one still being indexed waits.
    """
    async with deps.pool.acquire() as conn, conn.transaction():
        claimed = await repo.claim_gap_closures(
            pool=conn, limit=limit, stale_run_s=float(STALE_RUN_S)
        )
    for closure in claimed:
        if closure["document_status"] not in ("indexed", "duplicate"):
            await repo.fail_gap_closure(
                pool=deps.pool, closure_id=closure["id"],
                error=f"the document is {closure['document_status']}, not indexed",
            )  # fmt: skip
            continue
        try:
            gaps = await repo.open_gaps(
                pool=deps.pool, tenant_id=closure["tenant_id"], topic=closure["topic"], gap_ids=None
            )
            results = [await retry_gap(deps, gap) for gap in gaps]
        except Exception as exc:
            log.exception("re-trying gap topic %r failed", closure["topic"])
            await repo.fail_gap_closure(
                pool=deps.pool, closure_id=closure["id"], error=repr(exc)[:2000]
            )
            continue
        answered = sum(1 for r in results if r.outcome == "answered")
        await repo.finish_gap_closure(
            pool=deps.pool, closure_id=closure["id"], answered=answered,
            still_open=len(results) - answered,
        )  # fmt: skip
        log.info(
            "gap topic %r re-tried after its material was indexed: %d of %d answered",
            closure["topic"], answered, len(results),
        )  # fmt: skip
    return len(claimed)


async def closure_sweeper(deps: ChatDeps, *, every_s: float) -> None:
    """Run waiting closures every ``every_s`` seconds, for ever."""
    while True:
        await asyncio.sleep(every_s)
        try:
            while await run_closures(deps):
                pass
        except Exception:
            log.exception("gap closure sweep failed; retrying next interval")
