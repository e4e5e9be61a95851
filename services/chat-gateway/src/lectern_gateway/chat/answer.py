"""Step 3b, answer: the prompt, the streamed model answer with citations checked as each
sentence ends, and the final confidence; the answer is stored once complete."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from pydantic import BaseModel

from lectern_common import llm
from lectern_common.events import RecalledMemory
from lectern_common.outbox import enqueue
from lectern_common.topics import candidate_words, topics
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.citations import (
    CheckedCitation,
    SentenceTracker,
    check_sentence,
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
from lectern_gateway.chat.context import guess_topic
from lectern_gateway.chat.gap import record_gap
from lectern_gateway.chat.generation import Finished, TextDelta, Verdict, WebGrounding
from lectern_gateway.chat.prompt import (
    Prompt,
    PromptSource,
    PromptTurn,
    build_prompt,
    pages_label,
    system_prompt,
)
from lectern_gateway.chat.record import claim_answer, turn_completed
from lectern_gateway.chat.sse import (
    CheckEvent,
    Citation,
    CitationEvent,
    ConfidenceEvent,
    DoneEvent,
    Source,
    TokenEvent,
)
from lectern_gateway.chat.turn import ChatDeps, Retrieved, TurnInput, elapsed_ms
from lectern_gateway.chat.tutoring import asking_text, check_for_answer
from lectern_gateway.personas.service import persona_label, persona_prompt
from lectern_gateway.quality import aggregates as quality


def turn_prompt(
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
        persona=persona_prompt(turn.persona),
    )
    prompt_sources = [
        PromptSource(
            label=s.label,
            title=s.title,
            text=retrieved.texts[s.label],
            pages=pages_label(s.page_start, s.page_end, s.slide),
            section=s.section,
            score=s.score,
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
    built.web_search = turn.web_search
    return built


#: sentences of an answer on a topic the student has mastered
BRIEF_SENTENCES = 2


def remembered_on(
    remembered: Sequence[RecalledMemory], kind: str, asked_about: Sequence[str]
) -> RecalledMemory | None:
    """The recalled memory of ``kind`` whose topic is one the question is about (either
    names the other: "meiosis" and "mitosis and meiosis"), or None."""
    for memory in remembered:
        topic = (memory.topic or "").casefold()
        if memory.kind != kind or not topic:
            continue
        if any(f" {topic} " in f" {t} " or f" {t} " in f" {topic} " for t in asked_about):
            return memory
    return None


def previous_question(rows: Sequence[dict[str, Any]]) -> str:
    for row in reversed(rows):
        if row["role"] == "user":
            return str(row["content"])
    return ""


async def answer_turn(
    deps: ChatDeps,
    turn: TurnInput,
    retrieved: Retrieved,
    prompt: Prompt,
    user_message_id: uuid.UUID,
    timings: dict[str, float],
    *,
    general: bool,
    started: float,
    remembered: Sequence[RecalledMemory] = (),
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
    # what the student asked about, in the material's words (memory names topics with it)
    idf = await repo.word_idf(
        pool=deps.pool, tenant_id=turn.principal.tenant_id, words=candidate_words(turn.text)
    )
    asked_about = topics(turn.text, [retrieved.texts[s.label] for s in retrieved.sources
                                     if s.label in retrieved.texts], idf=idf)  # fmt: skip
    # what memory says of it: a struggle is revisited (tutor: with a check), a topic the
    # student has mastered is not explained again at length
    revisit = remembered_on(remembered, "struggle", asked_about) if not general else None
    known = remembered_on(remembered, "mastered", asked_about) if not general else None
    if revisit is not None and session["mode"] == "tutor":
        opening = f"Last time you found {revisit.topic} hard: let's go step by step.\n\n{opening}"
    elif known is not None:
        opening = f"You've already shown you know {known.topic}, so briefly:\n\n{opening}"
    # the opening is said with the answer's first words, not before: an answerer that finds
    # its sources do not answer (a ``no_support`` verdict) speaks alone, in one voice
    pending_opening = bool(opening)
    said = 0  # finished sentences of the model's text
    no_support = False
    answer = ""
    tracker = SentenceTracker(text="", _done=0)
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
            if isinstance(piece, Verdict):
                if piece.outcome == "no_support" and pending_opening and not general:
                    pending_opening, opening = False, ""
                no_support = no_support or piece.outcome == "no_support"
            elif isinstance(piece, TextDelta):
                if not piece.text or (known is not None and said >= BRIEF_SENTENCES):
                    continue
                if pending_opening:
                    pending_opening = False
                    answer = opening
                    tracker = SentenceTracker(text=opening, _done=len(opening))
                    yield TokenEvent(text=opening, origin="gateway")
                if "first_token_ms" not in timings:
                    timings["first_token_ms"] = elapsed_ms(started)
                    timings["model_first_token_ms"] = elapsed_ms(generation_started)
                answer += piece.text
                model_text += piece.text
                yield TokenEvent(text=piece.text)
                for sentence in tracker.feed(piece.text):
                    said += 1
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
    timings["generation_ms"] = elapsed_ms(generation_started)
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
    if supports:
        # the stored answer carries each [W#] after the span it supports, as the client shows it
        answer = opening + llm.insert_labels(model_text, [(e, ls) for _, e, _, ls in supports])
    sentences, _ = split_sentences(model_text, final=True)
    grounding = grounding_of(checked, sentences=sentences) if not general else 0.0
    confidence = final_confidence(
        prior,
        grounding=grounding,
        weight=settings.grounding_weight,
        thresholds=turn.bands(settings),
    )
    no_support = no_support or finished.usage.get("outcome") == "no_support"
    if no_support:
        # the answerer found nothing in the sources that answers: say so in the band too
        confidence = confidence.model_copy(update={"band": lower_band(confidence.band, "low")})
    confidence = in_band(confidence, turn.bands(settings))
    # a caveat qualifies an answer; a "the material does not answer this" needs none
    closing = "" if general or no_support else caveat(prior.band, confidence.band)
    if closing:
        # the opening was streamed for the prior band: the copy ends in the final band's words
        answer += closing
        yield TokenEvent(text=closing, origin="gateway")
    check = None
    if session["mode"] in ("tutor", "drill") and not general and confidence.band != "low":
        # a question on what the sources say, judged when the student replies
        cited = [(c.label, c.sentence.text) for c in checked if c.valid and c.supported]
        already = await repo.asked_checks(
            pool=deps.pool, tenant_id=turn.principal.tenant_id, session_id=session["id"]
        )
        check = check_for_answer(
            retrieved.sources, retrieved.texts, cited, asked=turn.text, topics=asked_about,
            already=already,
        )  # fmt: skip
        if check is not None:
            asking = asking_text(check, lead="\n\nCheck your understanding: ")
            answer += asking
            yield TokenEvent(text=asking, origin="gateway")
            yield CheckEvent(phase="asked", question=str(check["prompt"]), kind=check["kind"])
    yield ConfidenceEvent(**confidence.model_dump())
    all_citations = citations + [w for w in web if not any(c.label == w.label for c in citations)]
    flagged = list(dict.fromkeys(c.label for c in checked if not c.supported))
    message_id = uuid.uuid4()
    timings["total_ms"] = elapsed_ms(started)
    usage = dict(finished.usage)
    usage["prompt_tokens_estimate"] = prompt.tokens
    usage["dropped_history"] = prompt.dropped_history
    usage["dropped_sources"] = prompt.dropped_sources
    topic = guess_topic(turn.text, turn.session, retrieved.topic_tags)
    # the answer said the material does not answer the question: a knowledge gap as much as
    # one the retrieval found, for the teacher's report and the student's memory
    refused = no_support and not general
    related = (
        await repo.related_topics(
            pool=deps.pool, tenant_id=principal.tenant_id, subject=session.get("subject"), limit=5
        )
        if refused
        else []
    )
    completed = turn_completed(
        turn,
        user_message_id,
        message_id,
        answer,
        confidence,
        all_citations,
        finished.answered_by,
        topic=topic,
        topics=asked_about,
        knowledge_gap=refused,
    )
    async with deps.pool.acquire() as conn, conn.transaction():
        stored = await claim_answer(conn, turn, message_id)
        if stored == message_id:  # else an earlier run of this turn stored it
            await repo.insert_message(
                pool=conn,
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
                tutor_check=check,
            )
            if refused:
                await record_gap(
                    conn, turn, gap_id=uuid.uuid4(), question=turn.text, topic=topic,
                    confidence=confidence.score, message_id=message_id, related=related,
                )  # fmt: skip
            await enqueue(conn, completed)
            await quality.record_turn(
                conn,
                quality.Dimensions.of_session(principal.tenant_id, session),
                band=confidence.band,
                cited_documents=list(
                    {c.document_id for c in all_citations if c.document_id and c.valid}
                ),
                fallback=bool(usage.get("fallback_from")),
                ttft_ms=timings.get("first_token_ms"),
                retrieval_ms=timings.get("retrieve_ms"),
                gap_topic=topic if refused else None,
            )
    message_id = stored
    yield DoneEvent(
        message_id=message_id,
        user_message_id=user_message_id,
        session_id=session["id"],
        citations=all_citations,
        unsupported=flagged,
        band=confidence.band,
        confidence=confidence.score,
        knowledge_gap=refused,
        answered_by=finished.answered_by,
        persona=persona_label(turn.persona),
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
