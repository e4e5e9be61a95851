"""One chat turn, end to end, as a stream of typed events (no HTTP in here).

The flow, one module per step: ``context`` (filters, student context, memories) ->
``retrieve`` (candidates, re-ranking, sources) -> ``gap`` (no material: say so) or
``answer`` (prompt, streamed tokens with citations as sentences finish, citation check,
final confidence, the answer stored) -> ``record`` (``chat.turn.completed``) -> done.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator

from pydantic import BaseModel

from lectern_common.education import band_for
from lectern_common.errors import LecternError
from lectern_common.events import RecalledMemory
from lectern_common.events.retrieval import Turn
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat import social, tutoring
from lectern_gateway.chat.answer import answer_turn, previous_question, turn_prompt
from lectern_gateway.chat.context import cited_documents, recall_memories
from lectern_gateway.chat.gap import gap_turn
from lectern_gateway.chat.prompt import (
    PromptTurn,
    asks_for_general_explanation,
)
from lectern_gateway.chat.retrieve import retrieve_sources
from lectern_gateway.chat.sse import (
    ErrorEvent,
    SourcesEvent,
)
from lectern_gateway.chat.turn import ChatDeps, Retrieved, TurnInput, elapsed_ms


async def run_turn(deps: ChatDeps, turn: TurnInput) -> AsyncGenerator[BaseModel, None]:
    """Answer one question as a stream of typed events (see ``chat.sse``)."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    principal, session = turn.principal, turn.session
    session_id: uuid.UUID = session["id"]
    user_message_id = turn.message_id or uuid.uuid4()
    # the history read excludes the new message, so both statements can run at once (a
    # resumed turn's question is stored already, and maybe its answer: the history ends
    # before it, as when the turn was first answered)
    _, rows = await asyncio.gather(
        repo.insert_message(
            pool=deps.pool,
            message_id=user_message_id,
            session_id=session_id,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            role="user",
            content=turn.text,
            if_absent=turn.resumed,
        ),
        repo.recent_messages(
            pool=deps.pool,
            tenant_id=principal.tenant_id,
            session_id=session_id,
            limit=deps.settings.history_messages,
            before=user_message_id,
            only_earlier=turn.resumed,
        ),
    )
    history = [PromptTurn(role=r["role"], text=r["content"]) for r in rows]
    timings["store_question_ms"] = elapsed_ms(started)
    if session["mode"] in ("tutor", "drill"):
        pending = tutoring.pending_check(rows)
        asks = tutoring.is_new_question(turn.text)
        if pending is not None and not asks:
            async for event in tutoring.check_turn(
                deps, turn, pending, user_message_id, timings, started=started,
                writer=deps.quiz_writer, embedder=deps.embedder,
            ):  # fmt: skip
                yield event
            return
        if pending is not None:
            async with deps.pool.acquire() as conn, conn.transaction():
                await tutoring.settle_skipped(
                    conn, tenant_id=principal.tenant_id, user_id=principal.user_id,
                    pending=pending,
                )  # fmt: skip
        if session["mode"] == "drill" and not asks:
            async for event in tutoring.practice_turn(
                deps, turn, user_message_id, timings, started=started
            ):
                yield event
            return
    small_talk = social.social_kind(turn.text)
    if small_talk is not None:  # "thanks!", "ok cool": nothing to look up
        async for event in social.social_turn(
            deps, turn, small_talk, user_message_id, timings, started=started
        ):
            yield event
        return
    general = bool(rows) and rows[-1]["confidence_band"] == "gap"
    general = general and asks_for_general_explanation(turn.text)
    question = previous_question(rows) if general else turn.text

    async def timed_recall() -> list[RecalledMemory]:
        begun = time.perf_counter()
        memories = await recall_memories(deps, principal=principal, query=question)
        timings["memory_ms"] = elapsed_ms(begun)
        return memories

    memory_task = asyncio.create_task(timed_recall())
    try:
        retrieved = (
            Retrieved()
            if general
            else await retrieve_sources(
                deps,
                principal=principal,
                session=session,
                query=question,
                history=[Turn(role=h.role, text=h.text) for h in history],
                timings=timings,
                cited_document_ids=cited_documents(rows),
                persona=turn.persona,
            )
        )
        remembered = await memory_task
    except LecternError as exc:
        yield ErrorEvent(reason=exc.reason, message=exc.message, retryable=True)
        return
    finally:
        if not memory_task.done():
            memory_task.cancel()
    if turn.thresholds is not None and retrieved.sources:
        # the persona's own cut-offs band the re-ranker's verdict
        c = retrieved.confidence
        band = band_for(c.score, c.retrieval, turn.thresholds)
        retrieved.confidence = c.model_copy(update={"band": band})
    memories = [m.text for m in remembered]
    gap = not general and retrieved.confidence.band == "gap"
    prompt = (
        None if gap else turn_prompt(deps, turn, question, retrieved, history, memories, general)
    )
    if prompt is not None:
        # sources trimmed to fit the context budget are not offered (nor citable)
        kept = {s.label for s in prompt.sources}
        retrieved.sources = [s for s in retrieved.sources if s.label in kept]
        retrieved.texts = {k: v for k, v in retrieved.texts.items() if k in kept}
    yield SourcesEvent(sources=retrieved.sources)

    if turn.delay_s > 0:
        await asyncio.sleep(turn.delay_s)
        timings["rate_limit_delay_ms"] = round(turn.delay_s * 1000, 2)

    if prompt is None:
        async for event in gap_turn(deps, turn, question, retrieved, user_message_id, timings):
            yield event
        return
    async for event in answer_turn(
        deps, turn, retrieved, prompt, user_message_id, timings, general=general,
        started=started, remembered=remembered,
    ):  # fmt: skip
        yield event
