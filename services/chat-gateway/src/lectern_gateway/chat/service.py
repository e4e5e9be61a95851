"""One chat turn, end to end, as a stream of typed events (no HTTP in here).

Order: store the question -> history + memories + retrieval -> re-ranking -> sources ->
(gap message | band preamble + streamed model tokens with citations as sentences finish) ->
citation check -> final confidence -> store the answer -> ``chat.turn.completed`` -> done.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from faststream.nats import NatsBroker
from pydantic import BaseModel

from lectern_common.broker import publish_event, request
from lectern_common.education import preferred_content_types
from lectern_common.errors import LecternError
from lectern_common.events import (
    Candidate,
    ChatSessionEnded,
    ChatTurnCompleted,
    Confidence,
    KnowledgeGapDetected,
    MemoryRecallReply,
    MemoryRecallRequest,
    RankedChunk,
    RerankReply,
    RerankRequest,
    RetrievalFilters,
    RetrieveReply,
    RetrieveRequest,
    StudentContext,
)
from lectern_common.events.base import Event
from lectern_common.events.chat import CitationRef
from lectern_common.events.retrieval import Turn
from lectern_common.text import resolve_follow_up
from lectern_gateway.auth import Principal
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.citations import (
    CheckedCitation,
    SentenceTracker,
    check_sentence,
    content_terms,
    grounding_of,
    split_sentences,
)
from lectern_gateway.chat.confidence import (
    caveat,
    final_confidence,
    in_band,
    lower_band,
    no_material,
    preamble,
)
from lectern_gateway.chat.generation import AnswerStreamer, Finished, TextDelta, WebGrounding
from lectern_gateway.chat.prompt import (
    Prompt,
    PromptSource,
    PromptTurn,
    asks_for_general_explanation,
    build_prompt,
    knowledge_gap_message,
    pages_label,
    system_prompt,
)
from lectern_gateway.chat.sse import (
    Citation,
    CitationEvent,
    ConfidenceEvent,
    DoneEvent,
    ErrorEvent,
    Source,
    SourcesEvent,
    TokenEvent,
)
from lectern_gateway.config import Settings

log = logging.getLogger(__name__)

#: share of the context budget the re-ranker may fill with sources
SOURCE_BUDGET_SHARE = 0.6
#: answers whose cited documents the retriever boosts (follow-up questions stay on them)
CITED_TURNS = 3


@dataclass
class ChatDeps:
    """What a turn needs from the running gateway."""

    pool: Any
    broker: NatsBroker
    settings: Settings
    streamer: AnswerStreamer


@dataclass
class Retrieved:
    """Sources chosen for a turn and the confidence prior."""

    sources: list[Source] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    topic_tags: list[str] = field(default_factory=list)
    confidence: Confidence = field(default_factory=no_material)


async def publish(broker: NatsBroker, event: Event) -> None:
    """Publish an event on its JetStream stream."""
    await publish_event(broker, event)


def collections_for(principal: Principal) -> list[str]:
    """Collections a caller's chat may draw on: never assessments (chat is for learning)."""
    return ["educational"]


def filters_for(session: dict[str, Any]) -> RetrievalFilters:
    """Retrieval filters from the session's subject, module, class and grade.

    A class session draws on its class's material and on material assigned to no class (the
    re-ranker prefers the class teacher's), never on another class's.
    """
    class_id = session.get("class_id")
    return RetrievalFilters(
        collections=["educational"],
        subject=session.get("subject"),
        grade_level=session.get("grade_level"),
        grade_within_one=session.get("grade_level") is not None,
        module_tag=session.get("module_tag"),
        class_id=class_id,
        include_unassigned=class_id is not None,
        include_untagged=True,
    )


def boost_tags_for(session: dict[str, Any]) -> list[str]:
    """Topic tags the retriever boosts: the session's module."""
    module = session.get("module_tag")
    return [module] if module else []


def cited_documents(rows: Sequence[dict[str, Any]], *, turns: int = CITED_TURNS) -> list[uuid.UUID]:
    """Documents cited by the session's last ``turns`` answers, most recent first."""
    answers = [r for r in rows if r["role"] == "assistant"][-turns:]
    found: list[uuid.UUID] = []
    for row in reversed(answers):
        for citation in row.get("citations") or []:
            raw = citation.get("document_id") if isinstance(citation, dict) else None
            try:
                document_id = uuid.UUID(str(raw)) if raw else None
            except ValueError:
                continue
            if document_id is not None and document_id not in found:
                found.append(document_id)
    return found


def student_context(
    principal: Principal, session: dict[str, Any], *, teacher_ids: Sequence[str]
) -> StudentContext:
    """What the re-ranker's educational signals need to know of the asker."""
    style = session.get("learning_style")
    return StudentContext(
        user_id=principal.user_id,
        grade_level=session.get("grade_level"),
        subject=session.get("subject"),
        class_id=session.get("class_id"),
        teacher_ids=list(teacher_ids),
        curriculum_standards=list(session.get("curriculum_standards") or []),
        learning_style=style,
        preferred_content_types=preferred_content_types(style),
    )


def guess_topic(question: str, session: dict[str, Any], tags: Sequence[str]) -> str | None:
    """A topic to group a gap under: the material's tag, else the question's key words."""
    if tags:
        return tags[0]
    words = [w for w in re.findall(r"[^\W_]+", question.lower()) if content_terms(w)]
    key = sorted(dict.fromkeys(words), key=len, reverse=True)[:3]
    if key:
        return " ".join(w for w in words if w in key)[:120]
    return session.get("module_tag") or session.get("subject")


async def recall_memories(deps: ChatDeps, *, principal: Principal, query: str) -> list[str]:
    """Top long-term memories of the student; empty when the memory service is silent."""
    try:
        reply = await request(
            deps.broker,
            MemoryRecallRequest(
                tenant_id=principal.tenant_id,
                user_id=principal.user_id,
                query=query,
                k=deps.settings.memory_k,
            ),
            MemoryRecallReply,
            timeout=deps.settings.memory_timeout_s,
        )
    except LecternError as exc:
        log.info("memory recall skipped: %s", exc.message)
        return []
    return [m.text for m in reply.memories[: deps.settings.memory_k]]


async def retrieve_sources(
    deps: ChatDeps,
    *,
    principal: Principal,
    session: dict[str, Any],
    query: str,
    history: Sequence[Turn],
    timings: dict[str, float],
    cited_document_ids: Sequence[uuid.UUID] = (),
) -> Retrieved:
    """Retrieve, re-rank and keep only chunks the caller may see, labelled T1..Tn."""
    settings = deps.settings
    started = time.perf_counter()

    async def teachers() -> list[str]:
        # looked up while the retriever works: only the re-ranker needs it
        class_id = session.get("class_id")
        if not class_id:
            return []
        begun = time.perf_counter()
        found = await repo.class_teachers(
            pool=deps.pool, tenant_id=principal.tenant_id, class_id=class_id
        )
        timings["class_teachers_ms"] = _ms(begun)
        return found

    retrieved, teacher_ids = await asyncio.gather(
        request(
            deps.broker,
            RetrieveRequest(
                tenant_id=principal.tenant_id,
                query=query,
                filters=filters_for(session),
                k=settings.retrieve_k,
                history=list(history[-4:]),
                boost_tags=boost_tags_for(session),
                cited_document_ids=list(cited_document_ids),
            ),
            RetrieveReply,
            timeout=settings.retrieve_timeout_s,
        ),
        teachers(),
    )
    timings["retrieve_ms"] = _ms(started)
    # defence in depth: whatever the retriever returned, only the caller's tenant's live,
    # allowed-collection chunks go on to the re-ranker and the prompt
    started = time.perf_counter()
    rows = await repo.visible_chunks(
        pool=deps.pool,
        tenant_id=principal.tenant_id,
        chunk_ids=[c.chunk_id for c in retrieved.candidates],
        collections=collections_for(principal),
    )
    candidates = [c for c in retrieved.candidates if c.chunk_id in rows]
    timings["visibility_ms"] = _ms(started)
    if not candidates:
        return Retrieved()
    started = time.perf_counter()
    reranked = await request(
        deps.broker,
        RerankRequest(
            tenant_id=principal.tenant_id,
            # a follow-up ("where does it happen?") is scored with the topic it refers to,
            # the same resolution the retriever applied to find the candidates
            query=resolve_follow_up(query, [t.text for t in history[-4:] if t.role == "user"]),
            candidates=candidates,
            top_k=settings.rerank_top_k,
            token_budget=max(100, int(settings.context_token_budget * SOURCE_BUDGET_SHARE)),
            student=student_context(principal, session, teacher_ids=teacher_ids),
        ),
        RerankReply,
        timeout=settings.rerank_timeout_s,
    )
    timings["rerank_ms"] = _ms(started)
    return _labelled(rows, reranked.chunks, reranked.confidence)


def _labelled(
    rows: dict[uuid.UUID, dict[str, Any]],
    ranked: Sequence[RankedChunk],
    confidence: Confidence | None,
) -> Retrieved:
    out = Retrieved(confidence=confidence or no_material())
    for item in ranked:
        row = rows.get(item.candidate.chunk_id)
        if row is None:
            continue
        label = f"T{len(out.sources) + 1}"
        out.sources.append(_source(label, item.candidate, row, item.score))
        out.texts[label] = str(row["text"])
        out.topic_tags.extend(t for t in row["topic_tags"] or [] if t not in out.topic_tags)
    if not out.sources:
        out.confidence = no_material()
    return out


def _source(label: str, candidate: Candidate, row: dict[str, Any], score: float) -> Source:
    section = " > ".join(row["section_path"] or []) or row.get("chapter") or None
    return Source(
        label=label,
        chunk_id=candidate.chunk_id,
        document_id=row["document_id"],
        title=row["title"],
        page_start=row["page_start"],
        page_end=row["page_end"],
        slide=row["slide"],
        section=section,
        score=round(float(score), 4),
    )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


@dataclass
class TurnInput:
    """One question in one session."""

    principal: Principal
    session: dict[str, Any]
    text: str
    delay_s: float = 0.0


async def run_turn(deps: ChatDeps, turn: TurnInput) -> AsyncGenerator[BaseModel, None]:
    """Answer one question as a stream of typed events (see ``chat.sse``)."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    principal, session = turn.principal, turn.session
    session_id: uuid.UUID = session["id"]
    user_message_id = uuid.uuid4()
    # the history read excludes the new message, so both statements can run at once
    _, rows = await asyncio.gather(
        repo.insert_message(
            pool=deps.pool,
            message_id=user_message_id,
            session_id=session_id,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            role="user",
            content=turn.text,
        ),
        repo.recent_messages(
            pool=deps.pool,
            tenant_id=principal.tenant_id,
            session_id=session_id,
            limit=deps.settings.history_messages,
            before=user_message_id,
        ),
    )
    history = [PromptTurn(role=r["role"], text=r["content"]) for r in rows]
    timings["store_question_ms"] = _ms(started)
    general = bool(rows) and rows[-1]["confidence_band"] == "gap"
    general = general and asks_for_general_explanation(turn.text)
    question = _previous_question(rows) if general else turn.text

    async def timed_recall() -> list[str]:
        begun = time.perf_counter()
        memories = await recall_memories(deps, principal=principal, query=question)
        timings["memory_ms"] = _ms(begun)
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
            )
        )
        memories = await memory_task
    except LecternError as exc:
        yield ErrorEvent(reason=exc.reason, message=exc.message, retryable=True)
        return
    finally:
        if not memory_task.done():
            memory_task.cancel()
    gap = not general and retrieved.confidence.band == "gap"
    prompt = None if gap else _prompt(deps, turn, question, retrieved, history, memories, general)
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
        async for event in _gap_turn(deps, turn, question, retrieved, user_message_id, timings):
            yield event
        return
    async for event in _answer_turn(
        deps, turn, retrieved, prompt, user_message_id, timings, general=general, started=started
    ):
        yield event


def _prompt(
    deps: ChatDeps,
    turn: TurnInput,
    question: str,
    retrieved: Retrieved,
    history: list[PromptTurn],
    memories: list[str],
    general: bool,
) -> Prompt:
    session = turn.session
    system = system_prompt(
        mode=session["mode"],
        learning_style=session.get("learning_style"),
        explanation_depth=session.get("explanation_depth"),
        grade_level=session.get("grade_level"),
        memories=memories,
        with_sources=not general,
    )
    prompt_sources = [
        PromptSource(
            label=s.label,
            title=s.title,
            text=retrieved.texts[s.label],
            pages=pages_label(s.page_start, s.page_end, s.slide),
            section=s.section,
        )
        for s in retrieved.sources
    ]
    built = build_prompt(
        system=system,
        question=question,
        history=history,
        sources=prompt_sources,
        budget=deps.settings.context_token_budget,
    )
    built.memories = list(memories)
    return built


def _previous_question(rows: Sequence[dict[str, Any]]) -> str:
    for row in reversed(rows):
        if row["role"] == "user":
            return str(row["content"])
    return ""


async def _gap_turn(
    deps: ChatDeps,
    turn: TurnInput,
    question: str,
    retrieved: Retrieved,
    user_message_id: uuid.UUID,
    timings: dict[str, float],
) -> AsyncIterator[BaseModel]:
    principal, session = turn.principal, turn.session
    related = await repo.related_topics(
        pool=deps.pool, tenant_id=principal.tenant_id, subject=session.get("subject"), limit=5
    )
    topic = guess_topic(question, session, [])
    related = [t for t in related if t != topic][:5]
    text = knowledge_gap_message(question=question, related_topics=related)
    yield TokenEvent(text=text, origin="gateway")
    confidence = in_band(retrieved.confidence, deps.settings.band_thresholds())
    yield ConfidenceEvent(**confidence.model_dump())
    message_id, gap_id = uuid.uuid4(), uuid.uuid4()
    await repo.insert_message(
        pool=deps.pool,
        message_id=message_id,
        session_id=session["id"],
        tenant_id=principal.tenant_id,
        user_id=principal.user_id,
        role="assistant",
        content=text,
        confidence=confidence.score,
        band="gap",
        answered_by="gap",
        timings=timings,
    )
    await repo.insert_gap(
        pool=deps.pool,
        gap_id=gap_id,
        tenant_id=principal.tenant_id,
        session_id=session["id"],
        user_id=principal.user_id,
        question=question,
        topic=topic,
        subject=session.get("subject"),
        confidence=confidence.score,
        message_id=message_id,
        related=related,
    )
    await publish(
        deps.broker,
        KnowledgeGapDetected(
            tenant_id=principal.tenant_id,
            gap_id=gap_id,
            session_id=session["id"],
            user_id=principal.user_id,
            question=question,
            topic=topic,
            subject_area=session.get("subject"),
            confidence=confidence.score,
        ),
    )
    await _publish_turn(
        deps, turn, user_message_id, message_id, text, confidence, [], "gap", topic=topic
    )
    yield DoneEvent(
        message_id=message_id,
        user_message_id=user_message_id,
        session_id=session["id"],
        citations=[],
        band="gap",
        confidence=confidence.score,
        knowledge_gap=True,
        answered_by="gap",
        timings_ms=timings,
    )


async def _answer_turn(
    deps: ChatDeps,
    turn: TurnInput,
    retrieved: Retrieved,
    prompt: Prompt,
    user_message_id: uuid.UUID,
    timings: dict[str, float],
    *,
    general: bool,
    started: float,
) -> AsyncIterator[BaseModel]:
    settings, session, principal = deps.settings, turn.session, turn.principal
    texts = retrieved.texts
    prior = (
        retrieved.confidence
        if not general
        else no_material().model_copy(update={"band": "low", "score": 0.2})
    )
    opening = "" if general else preamble(prior.band)
    if general:
        opening = "This general explanation is not based on your course materials.\n\n"
    answer = opening
    if opening:
        yield TokenEvent(text=opening, origin="gateway")
    tracker = SentenceTracker(text=opening, _done=len(opening))
    checked: list[CheckedCitation] = []
    citations: list[Citation] = []
    web: list[Citation] = []
    supports: list[tuple[int, int, str, list[str]]] = []
    finished = Finished(answered_by="unknown")
    by_label = {s.label: s for s in retrieved.sources}
    generation_started = time.perf_counter()
    stream = deps.streamer(prompt)
    model_text = ""
    try:
        async for piece in stream:
            if isinstance(piece, TextDelta):
                if not piece.text:
                    continue
                if "first_token_ms" not in timings:
                    timings["first_token_ms"] = _ms(started)
                    timings["model_first_token_ms"] = _ms(generation_started)
                answer += piece.text
                model_text += piece.text
                yield TokenEvent(text=piece.text)
                for sentence in tracker.feed(piece.text):
                    for c in check_sentence(sentence, texts, threshold=settings.support_threshold):
                        checked.append(c)
                        citation = _textbook_citation(c, by_label)
                        citations.append(citation)
                        yield CitationEvent(citation=citation)
            elif isinstance(piece, WebGrounding):
                for label, uri, title in piece.sources:
                    citation = Citation(label=label, kind="web", url=uri, title=title)
                    web.append(citation)
                    yield CitationEvent(citation=citation)
                supports.extend(piece.supports)
            elif isinstance(piece, Finished):
                finished = piece
    finally:
        # a client disconnect cancels this generator: closing the stream cancels the model call
        with anyio.CancelScope(shield=True):
            await stream.aclose()
    timings["generation_ms"] = _ms(generation_started)
    for sentence in tracker.finish():
        for c in check_sentence(sentence, texts, threshold=settings.support_threshold):
            checked.append(c)
            citation = _textbook_citation(c, by_label)
            citations.append(citation)
            yield CitationEvent(citation=citation)
    web_by_label = {w.label: w for w in web}
    for start, end, span, labels in supports:
        for label in labels:
            if label in web_by_label:
                w = web_by_label[label]
                spanned = w.model_copy(
                    update={
                        "span_start": start + len(opening),
                        "span_end": end + len(opening),
                        "text": span,
                    }
                )
                citations.append(spanned)
                yield CitationEvent(citation=spanned)
    sentences, _ = split_sentences(model_text, final=True)
    grounding = grounding_of(checked, sentences=sentences) if not general else 0.0
    confidence = final_confidence(
        prior,
        grounding=grounding,
        weight=settings.grounding_weight,
        thresholds=settings.band_thresholds(),
    )
    if finished.usage.get("outcome") == "no_support":
        # the answerer found nothing in the sources that answers: say so in the band too
        confidence = confidence.model_copy(update={"band": lower_band(confidence.band, "low")})
    confidence = in_band(confidence, settings.band_thresholds())
    closing = "" if general else caveat(prior.band, confidence.band)
    if closing:
        # the opening was streamed for the prior band: the copy ends in the final band's words
        answer += closing
        yield TokenEvent(text=closing, origin="gateway")
    yield ConfidenceEvent(**confidence.model_dump())
    all_citations = citations + [w for w in web if not any(c.label == w.label for c in citations)]
    flagged = list(dict.fromkeys(c.label for c in checked if not c.supported))
    message_id = uuid.uuid4()
    timings["total_ms"] = _ms(started)
    usage = dict(finished.usage)
    usage["prompt_tokens_estimate"] = prompt.tokens
    usage["dropped_history"] = prompt.dropped_history
    usage["dropped_sources"] = prompt.dropped_sources
    await repo.insert_message(
        pool=deps.pool,
        message_id=message_id,
        session_id=session["id"],
        tenant_id=principal.tenant_id,
        user_id=principal.user_id,
        role="assistant",
        content=answer,
        citations=repo.citations_json(all_citations),
        confidence=confidence.score,
        band=confidence.band,
        answered_by=finished.answered_by,
        usage=usage,
        timings=timings,
    )
    await _publish_turn(
        deps,
        turn,
        user_message_id,
        message_id,
        answer,
        confidence,
        all_citations,
        finished.answered_by,
        topic=guess_topic(turn.text, turn.session, retrieved.topic_tags),
    )
    yield DoneEvent(
        message_id=message_id,
        user_message_id=user_message_id,
        session_id=session["id"],
        citations=all_citations,
        unsupported=flagged,
        band=confidence.band,
        confidence=confidence.score,
        answered_by=finished.answered_by,
        memories_used=prompt.memories,
        usage=usage,
        timings_ms=timings,
    )


def _textbook_citation(checked: CheckedCitation, by_label: dict[str, Source]) -> Citation:
    source = by_label.get(checked.label)
    return Citation(
        label=checked.label,
        kind="textbook",
        chunk_id=source.chunk_id if source and checked.valid else None,
        document_id=source.document_id if source and checked.valid else None,
        title=source.title if source and checked.valid else None,
        span_start=checked.sentence.start,
        span_end=checked.sentence.end,
        text=checked.sentence.text,
        support=checked.support,
        supported=checked.supported,
        valid=checked.valid,
    )


async def _publish_turn(
    deps: ChatDeps,
    turn: TurnInput,
    user_message_id: uuid.UUID,
    message_id: uuid.UUID,
    answer: str,
    confidence: Confidence,
    citations: Sequence[Citation],
    answered_by: str,
    topic: str | None = None,
) -> None:
    refs = [
        CitationRef(
            label=c.label,
            chunk_id=c.chunk_id,
            document_id=c.document_id,
            url=c.url,
            title=c.title,
            support=c.support,
        )
        for c in citations
    ]
    await publish(
        deps.broker,
        ChatTurnCompleted(
            tenant_id=turn.principal.tenant_id,
            session_id=turn.session["id"],
            user_id=turn.principal.user_id,
            user_message_id=user_message_id,
            assistant_message_id=message_id,
            mode=turn.session["mode"],
            question=turn.text,
            answer=answer,
            confidence=confidence.score,
            band=confidence.band,
            knowledge_gap=confidence.band == "gap",
            citations=refs,
            answered_by=answered_by,
            topic=topic or turn.session.get("module_tag"),
        ),
    )


async def end_session(
    *, pool: Any, broker: NatsBroker, tenant_id: str, session_id: uuid.UUID, reason: str
) -> bool:
    """End an active session and publish ``chat.session.ended``; False if it was not active."""
    row = await repo.end_session(
        pool=pool, tenant_id=tenant_id, session_id=session_id, reason=reason
    )
    if row is None:
        return False
    await _publish_ended(broker, row, reason)
    return True


async def _publish_ended(broker: NatsBroker, row: dict[str, Any], reason: str) -> None:
    await publish(
        broker,
        ChatSessionEnded(
            tenant_id=row["tenant_id"],
            session_id=row["id"],
            user_id=row["user_id"],
            reason="idle" if reason == "idle" else "explicit",
            message_count=int(row["n"]),
        ),
    )


async def sweep_idle_sessions(*, pool: Any, broker: NatsBroker, idle_s: float) -> int:
    """End every session idle longer than ``idle_s``; returns how many this replica ended."""
    total = 0
    while True:
        rows = await repo.claim_idle_sessions(pool=pool, idle_s=idle_s)
        for row in rows:
            await _publish_ended(broker, row, "idle")
        total += len(rows)
        if len(rows) < 100:
            return total


async def idle_sweeper(*, pool: Any, broker: NatsBroker, idle_s: float, every_s: float) -> None:
    """Run the idle sweep forever (cancel to stop)."""
    while True:
        try:
            ended = await sweep_idle_sessions(pool=pool, broker=broker, idle_s=idle_s)
            if ended:
                log.info("idle sweep ended %d sessions", ended)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("idle sweep failed")
        await asyncio.sleep(every_s)
