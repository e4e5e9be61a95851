"""Retrieve and re-rank: candidates from the retriever that the caller may see, re-ranked and
labelled as sources [T#]."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lectern_common import metrics
from lectern_common.broker import request
from lectern_common.education import (
    BI_ENCODER_CALIBRATION,
    BandThresholds,
    ConfidenceWeights,
    band_for,
)
from lectern_common.errors import NatsUnavailableError, RetryableError
from lectern_common.events import (
    Candidate,
    ChunkVisibility,
    Confidence,
    RankedChunk,
    RerankReply,
    RerankRequest,
    RetrieveReply,
    RetrieveRequest,
)
from lectern_common.events.chat import ConfidenceBand
from lectern_common.events.retrieval import ScopeFilter, Turn
from lectern_common.text import resolve_follow_up
from lectern_gateway.auth import Principal
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.context import (
    boost_tags_for,
    collections_for,
    filters_for,
    student_context,
)
from lectern_gateway.chat.decision import in_band, no_material
from lectern_gateway.chat.prompt import count_tokens
from lectern_gateway.chat.sse import Source
from lectern_gateway.chat.turn_input import ChatDeps, ChatSession, Retrieved, elapsed_ms
from lectern_gateway.classes.membership import student_classes
from lectern_gateway.index import as_row, chunks_by_id
from lectern_gateway.personas.service import TutorPersona

log = logging.getLogger(__name__)

#: share of the context budget the re-ranker may fill with sources
SOURCE_BUDGET_SHARE = 0.6
#: the re-ranker's neutral source quality and grounding prior (its defaults): a verdict from
#: the retriever's scores alone, when the re-ranker does not answer, is weighed alike
_FALLBACK_SOURCE_QUALITY = 0.5
_FALLBACK_GROUNDING_PRIOR = 1.0


@dataclass
class Candidates:
    """What the retriever found that the caller may see, and who teaches the session's class
    (the re-ranker's teacher signal)."""

    candidates: list[Candidate] = field(default_factory=list)
    rows: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    teacher_ids: list[str] = field(default_factory=list)
    idf: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Lookup:
    """What a turn looks up, and for whom: the asker, the session and its persona, the query,
    the conversation before it and the documents its recent answers cited."""

    principal: Principal
    session: ChatSession
    query: str
    history: Sequence[Turn] = ()
    persona: TutorPersona | None = None
    cited_document_ids: Sequence[uuid.UUID] = ()
    #: words whose BM25 idf the retriever's reply carries (the answer's topics)
    idf_words: Sequence[str] = ()


async def retrieve_sources(deps: ChatDeps, lookup: Lookup, timings: dict[str, float]) -> Retrieved:
    """Retrieve, re-rank and keep only chunks the caller may see, labelled T1..Tn."""
    found = await retrieve_candidates(deps, lookup, timings)
    return await rerank(deps, lookup, found, timings)


async def retrieve_candidates(
    deps: ChatDeps, lookup: Lookup, timings: dict[str, float]
) -> Candidates:
    """Candidates from the retriever (the session's filters, the persona's scope), less any
    chunk the caller may not see."""
    principal, session, persona = lookup.principal, lookup.session, lookup.persona
    settings = deps.settings
    started = time.perf_counter()

    async def teachers() -> list[str]:
        # looked up while the retriever works: only the re-ranker needs it
        class_id = session.class_id
        if not class_id:
            return []
        begun = time.perf_counter()
        found = await repo.class_teachers(
            pool=deps.pool, tenant_id=principal.tenant_id, class_id=class_id
        )
        timings["class_teachers_ms"] = elapsed_ms(begun)
        return found

    classes = await student_classes(deps.pool, principal)
    filters = filters_for(session, classes)
    boosts = boost_tags_for(session)
    scope: ScopeFilter | None = None
    collections = collections_for(principal)
    if persona is not None:  # the tutor's material only, and its tag boosts
        scope = persona.scope_filter()
        wanted = persona.collections
        collections = [c for c in wanted if principal.is_staff or c in collections]
        filters = filters.model_copy(update={"scope": scope, "collections": collections})
        boosts = list(dict.fromkeys([*boosts, *persona.tag_boosts]))
    retrieved, teacher_ids = await asyncio.gather(
        request(
            deps.broker,
            RetrieveRequest(
                tenant_id=principal.tenant_id,
                query=lookup.query,
                filters=filters,
                k=settings.retrieve_k,
                max_per_document=settings.retrieve_max_per_document,
                history=list(lookup.history[-4:]),
                boost_tags=boosts,
                cited_document_ids=list(lookup.cited_document_ids),
                idf_words=list(lookup.idf_words)[:64],
            ),
            RetrieveReply,
            timeout=settings.retrieve_timeout_s,
        ),
        teachers(),
    )
    timings["retrieve_ms"] = elapsed_ms(started)
    # defence in depth: whatever the retriever returned, only the caller's tenant's live,
    # allowed-collection chunks go on to the re-ranker and the prompt
    started = time.perf_counter()
    rows = await visible_rows(
        deps,
        principal.tenant_id,
        [c.chunk_id for c in retrieved.candidates],
        collections=collections,
        classes=allowed_classes(session, classes),
        scope=scope,
    )
    candidates = [c for c in retrieved.candidates if c.chunk_id in rows]
    timings["visibility_ms"] = elapsed_ms(started)
    return Candidates(candidates, rows, teacher_ids, idf=retrieved.idf)


async def visible_rows(
    deps: ChatDeps,
    tenant_id: str,
    chunk_ids: list[uuid.UUID],
    *,
    collections: Sequence[str],
    classes: Sequence[str] | None,
    scope: ScopeFilter | None,
) -> dict[uuid.UUID, dict[str, Any]]:
    """The chunks of ``chunk_ids`` the caller may see, by id, asked of the index's owner:
    whatever the search returned, only the caller's tenant's live, allowed chunks go on to
    the re-ranker and the prompt."""
    if not chunk_ids or not collections:
        return {}
    visible = ChunkVisibility.model_validate(
        {"collections": list(collections), "classes": classes, "scope": scope}
    )
    found = await chunks_by_id(deps.broker, deps.settings, tenant_id, chunk_ids, visible=visible)
    return {chunk_id: as_row(chunk) for chunk_id, chunk in found.items()}


async def rerank(
    deps: ChatDeps, lookup: Lookup, found: Candidates, timings: dict[str, float]
) -> Retrieved:
    """The re-ranker's choice of the candidates and its verdict, labelled T1..Tn (nothing to
    re-rank: no sources, no material)."""
    settings, principal, history = deps.settings, lookup.principal, lookup.history
    if not found.candidates:
        return Retrieved(idf=found.idf)
    started = time.perf_counter()
    asked = RerankRequest(
        tenant_id=principal.tenant_id,
        # a follow-up ("where does it happen?") is scored with the topic it refers to,
        # the same resolution the retriever applied to find the candidates
        query=resolve_follow_up(lookup.query, [t.text for t in history[-4:] if t.role == "user"]),
        candidates=found.candidates,
        top_k=settings.rerank_top_k,
        token_budget=max(100, int(settings.context_token_budget * SOURCE_BUDGET_SHARE)),
        student=student_context(principal, lookup.session, teacher_ids=found.teacher_ids),
    )
    try:
        reply = await request(deps.broker, asked, RerankReply, timeout=settings.rerank_timeout_s)
        chunks, confidence, reranked = reply.chunks, reply.confidence, True
    except NatsUnavailableError:
        raise  # the bus itself: nothing to fall back on
    except RetryableError as exc:
        if not settings.rerank_fallback:
            raise
        # the re-ranker did not answer in time (overloaded, restarting, down): the turn goes
        # on with the retriever's order and a verdict from its scores, at most ``low``
        log.warning("re-ranker did not answer (%s): answering from the retriever's order",
                    exc.message)  # fmt: skip
        metrics.RERANK_FALLBACKS.add(1, {"reason": exc.reason})
        chunks, confidence = retriever_order(asked, settings.band_thresholds())
        reranked = False
    timings["rerank_ms"] = elapsed_ms(started)
    labelled = _labelled(found.rows, chunks, confidence)
    labelled.idf = found.idf
    labelled.reranked = reranked
    return labelled


def retriever_order(
    asked: RerankRequest, thresholds: BandThresholds
) -> tuple[list[RankedChunk], Confidence]:
    """What a turn goes on with when the re-ranker does not answer: the retriever's first
    ``top_k`` candidates within the token budget, and a verdict from the best candidate's
    cosine to the question, calibrated as the re-ranker's bi-encoder does (a weak match is a
    knowledge gap), never above ``low``: nothing read the sources against the question."""
    kept: list[RankedChunk] = []
    used = 0
    for candidate in asked.candidates[: asked.top_k]:
        tokens = candidate.token_count or count_tokens(candidate.text)
        if kept and used + tokens > asked.token_budget:
            break
        used += tokens
        semantic = candidate.dense_score or 0.0
        kept.append(RankedChunk(candidate=candidate, semantic=semantic, score=semantic))
    cosines = [c.candidate.dense_score for c in kept if c.candidate.dense_score is not None]
    retrieval = BI_ENCODER_CALIBRATION(max(cosines)) if cosines else 0.0
    w = ConfidenceWeights()
    score = (
        w.retrieval * retrieval
        + w.source_quality * _FALLBACK_SOURCE_QUALITY
        + w.grounding * _FALLBACK_GROUNDING_PRIOR
    ) / (w.retrieval + w.source_quality + w.grounding)
    band: ConfidenceBand = "gap" if band_for(score, retrieval, thresholds) == "gap" else "low"
    confidence = Confidence(
        score=round(score, 6),
        band=band,
        retrieval=round(retrieval, 6),
        source_quality=_FALLBACK_SOURCE_QUALITY,
        grounding=_FALLBACK_GROUNDING_PRIOR,
    )
    return kept, in_band(confidence, thresholds)  # a low band's score stays under medium


def allowed_classes(session: ChatSession, classes: Sequence[str] | None) -> list[str] | None:
    """Classes whose material a turn may use: the session's class if the student is (still)
    in it, else the student's classes; ``None``: staff, any class."""
    if classes is None:
        return None
    class_id = session.class_id
    if class_id:
        return [class_id] if class_id in classes else []
    return list(classes)


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
        out.sources.append(_source(label, item, row))
        out.texts[label] = str(row["text"])
        out.topic_tags.extend(t for t in row["topic_tags"] or [] if t not in out.topic_tags)
    if not out.sources:
        out.confidence = no_material()
    return out


def _source(label: str, item: RankedChunk, row: dict[str, Any]) -> Source:
    candidate, answer = item.candidate, item.answer
    section = " > ".join(row["section_path"] or []) or row.get("chapter") or None
    text = str(row["text"])
    if (
        answer is not None
        and text[answer.start : answer.end] != candidate.text[answer.start : answer.end]
    ):
        answer = None  # the chunk changed since the re-ranker read it: its offsets are stale
    return Source(
        label=label,
        chunk_id=candidate.chunk_id,
        document_id=row["document_id"],
        title=row["title"],
        page_start=row["page_start"],
        page_end=row["page_end"],
        slide=row["slide"],
        section=section,
        score=round(float(item.score), 4),
        answer=answer,
    )
