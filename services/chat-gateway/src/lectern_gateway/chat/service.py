"""One chat turn as its steps, top to bottom, as a stream of typed events (no HTTP in here).

    load the session -> resolve the mode (chat, tutor, drill: one step object per turn) and
      the persona's cut-offs
      -> the mode's own reply (a check question judged, a practice question), or
         small talk, or a question:
           resolve the question -> retrieve -> re-rank (while memory recalls)
           -> decide (``chat.decision``) -> refuse (say so, record the gap)
                                         or answer (stream, cite as sentences end, settle)
    -> finish: store the message, write the outbox events, send ``done``

Every way a turn ends is an :class:`Ending`, and :func:`finish` is the only place that stores
one. A step that streams yields its SSE events (``chat.sse``) and, last, its ``Ending``.
The steps' helpers live beside them: ``context`` (filters, memories), ``retrieve``,
``decision`` (answer or refuse, the band), ``confidence`` (the band's words), ``prompt``,
``citations``, ``gap`` (a refusal's words, its web answer), ``tutoring`` (check questions),
``social`` (small talk), ``record`` (the turn's event).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from lectern_answerer.tables import cited_cell
from lectern_common.db.types import Connection
from lectern_common.errors import LecternError
from lectern_common.events import Confidence, RecalledMemory
from lectern_common.events.base import Event
from lectern_common.events.retrieval import Turn
from lectern_common.outbox import enqueue
from lectern_common.text import words as text_words
from lectern_common.topics import candidate_words, topics
from lectern_gateway.chat import generators, tutoring
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.citations import (
    CheckedCitation,
    SentenceTracker,
    check_sentence,
    grounding_of,
    split_cited_sentences,
)
from lectern_gateway.chat.confidence import caveat, preamble
from lectern_gateway.chat.context import (
    cited_documents,
    guess_topic,
    previous_question,
    recall_memories,
    remembered_on,
)
from lectern_gateway.chat.decision import (
    Decision,
    Evidence,
    Policy,
    Support,
    decide,
    no_material,
    settle,
)
from lectern_gateway.chat.prompt import (
    Prompt,
    PromptSource,
    PromptTurn,
    asks_for_general_explanation,
    build_prompt,
    pages_label,
)
from lectern_gateway.chat.record import claim_answer, turn_completed
from lectern_gateway.chat.refusal import (
    WebPart,
    gap_text,
    record_gap,
    spans_of,
    web_answer,
    web_citations,
)
from lectern_gateway.chat.retrieve import Lookup, rerank, retrieve_candidates
from lectern_gateway.chat.social import REPLIES, social_kind
from lectern_gateway.chat.sse import (
    CheckEvent,
    Citation,
    CitationEvent,
    ConfidenceEvent,
    DoneEvent,
    ErrorEvent,
    Source,
    SourcesEvent,
    TableCell,
    TokenEvent,
)
from lectern_gateway.chat.streamer import (
    Finished,
    Grounding,
    ModelUsage,
    Piece,
    TextDelta,
    Verdict,
)
from lectern_gateway.chat.turn_input import (
    ChatDeps,
    HistoryRow,
    PendingCheck,
    Retrieved,
    TurnInput,
    TutorCheck,
    elapsed_ms,
)
from lectern_gateway.index import related_topics
from lectern_gateway.quality import aggregates as quality

#: sentences of an answer on a topic the student has mastered
BRIEF_SENTENCES = 2
GENERAL_OPENING = "This general explanation is not based on your course materials.\n\n"
#: a reply the gateway writes itself, with nothing to doubt (small talk, a judged check)
CERTAIN = Confidence(score=1.0, band="high", retrieval=1.0, source_quality=1.0, grounding=1.0)


# ---------------------------------------------------------------- what the steps pass on


@dataclass
class Clock:
    """When the turn started, and the time of each step (``done``'s ``timings_ms``)."""

    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)

    def total(self) -> None:
        """Stamp the turn's total time."""
        self.timings["total_ms"] = elapsed_ms(self.started)


@dataclass
class Loaded:
    """The session as the turn found it: the question's id and the history before it."""

    user_message_id: uuid.UUID
    rows: list[HistoryRow]
    history: list[PromptTurn]


@dataclass(frozen=True)
class Question:
    """What the turn answers: the student's text, or (``general``) the question before a gap,
    explained in general when the student asks for it."""

    text: str
    general: bool = False


@dataclass
class Material:
    """What the turn found to answer from: the re-ranked sources and the recalled memories."""

    retrieved: Retrieved
    remembered: list[RecalledMemory]


@dataclass(frozen=True)
class GapRecord:
    """A question the material does not answer, for the teacher's gap report."""

    question: str
    topic: str | None
    related: list[str]


@dataclass(frozen=True)
class SettledCheck:
    """A check question this turn judged (or skipped), settled with the turn's answer."""

    message_id: uuid.UUID
    verdict: str
    judged_by: str
    #: the student's reply
    reply: str

    def outcome(self) -> dict[str, Any]:
        """What settling merges into the check's stored JSON (``chat_messages.tutor_check``)."""
        return {
            "status": "skipped" if self.verdict == "skipped" else "judged",
            "verdict": self.verdict, "reply": self.reply[:2000], "judged_by": self.judged_by,
        }  # fmt: skip


@dataclass(frozen=True)
class Usage:
    """What a turn's reply used, stored with its message (``chat_messages.usage``): the
    model's report; the prompt's estimate and what it dropped to fit its budget (an answer);
    a judged check's verdict and judge."""

    model: ModelUsage | None = None
    prompt_tokens_estimate: int | None = None
    dropped_history: int | None = None
    dropped_sources: list[str] | None = None
    verdict: str | None = None
    judged_by: str | None = None

    @property
    def fallback(self) -> bool:
        """The model that answered is a fallback of the one that failed."""
        return self.model is not None and bool(self.model.fallback_from)

    def as_json(self) -> dict[str, Any]:
        """As stored and shown in ``done``: the model's report, then what else was given."""
        own = {
            "prompt_tokens_estimate": self.prompt_tokens_estimate,
            "dropped_history": self.dropped_history, "dropped_sources": self.dropped_sources,
            "verdict": self.verdict, "judged_by": self.judged_by,
        }  # fmt: skip
        model = {} if self.model is None else self.model.as_json()
        return {**model, **{k: v for k, v in own.items() if v is not None}}


@dataclass
class Ending:
    """How a turn ends, whichever way: what :func:`finish` stores, announces and sends."""

    text: str
    confidence: Confidence
    answered_by: str
    citations: list[Citation] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    message_id: uuid.UUID = field(default_factory=uuid.uuid4)
    #: stored with the message, and shown in ``done`` unless ``usage_hidden``
    usage: Usage = field(default_factory=Usage)
    usage_hidden: bool = False
    tutor_check: TutorCheck | None = None
    topic: str | None = None
    topics: list[str] = field(default_factory=list)
    gap: GapRecord | None = None
    settles: SettledCheck | None = None
    #: more outbox events of the turn (a judged check's ``quiz.attempted``)
    events: list[Event] = field(default_factory=list)
    #: counted in the quality aggregates (a turn that asked the material)
    quality: bool = False
    persona: str | None = None
    memories_used: list[str] = field(default_factory=list)


#: a step that ends the turn: its events, then its ending
Step = AsyncGenerator[BaseModel | Ending, None]


# ---------------------------------------------------------------- the turn


async def run_turn(deps: ChatDeps, turn: TurnInput) -> AsyncIterator[BaseModel]:
    """Answer one message as a stream of typed events (see ``chat.sse``)."""
    clock = Clock()
    loaded = await load_session(deps, turn, clock)
    mode, policy = resolve(deps, turn)
    steps = (
        await mode.own_reply(deps, turn, loaded, clock)
        or small_talk(turn, clock)
        or answer_question(deps, turn, mode, policy, loaded, clock)
    )
    # a client disconnect closes this generator: the step's own is closed with it, at once
    async with aclosing(steps) as ending_step:
        async for item in ending_step:
            if isinstance(item, Ending):
                yield await finish(deps, turn, loaded, clock, item)
            else:
                yield item


def resolve(deps: ChatDeps, turn: TurnInput) -> tuple[ChatMode, Policy]:
    """The session's mode (a step object, chosen once) and the cut-offs the turn is decided
    with: the persona's own, else the deployment's."""
    policy = Policy(
        thresholds=turn.bands(deps.settings),
        persona_cuts=turn.thresholds is not None,
        grounding_weight=deps.settings.grounding_weight,
        answer_margin=deps.settings.answer_margin,
    )
    return mode_for(turn.session.mode), policy


async def load_session(deps: ChatDeps, turn: TurnInput, clock: Clock) -> Loaded:
    """Store the question and read the history before it."""
    principal, session = turn.principal, turn.session
    user_message_id = turn.message_id or uuid.uuid4()
    # the history read excludes the new message, so both statements can run at once (a
    # resumed turn's question is stored already, and maybe its answer: the history ends
    # before it, as when the turn was first answered)
    _, rows = await asyncio.gather(
        repo.insert_message(
            pool=deps.pool, message_id=user_message_id, session_id=session.id,
            tenant_id=principal.tenant_id, user_id=principal.user_id, role="user",
            content=turn.text, if_absent=turn.resumed,
        ),
        repo.recent_messages(
            pool=deps.pool, tenant_id=principal.tenant_id, session_id=session.id,
            limit=deps.settings.history_messages, before=user_message_id,
            only_earlier=turn.resumed,
        ),
    )  # fmt: skip
    clock.timings["store_question_ms"] = elapsed_ms(clock.started)
    history_rows = [HistoryRow.of_row(r) for r in rows]
    history = [PromptTurn(role=r.role, text=r.content) for r in history_rows]
    return Loaded(user_message_id, history_rows, history)


def small_talk(turn: TurnInput, clock: Clock) -> Step | None:
    """Small talk ("thanks!", "ok cool") is answered in kind: nothing to look up (None: the
    message says something)."""
    kind = social_kind(turn.text)
    return None if kind is None else social_reply(REPLIES[kind], clock)


async def social_reply(text: str, clock: Clock) -> Step:
    """Reply to small talk in kind: no sources, no gap, stored and announced (memory learns
    nothing from it)."""
    yield SourcesEvent(sources=[])
    yield TokenEvent(text=text, origin="gateway")
    yield ConfidenceEvent(**CERTAIN.model_dump())
    clock.total()
    yield Ending(text, CERTAIN, "social")


async def answer_question(
    deps: ChatDeps,
    turn: TurnInput,
    mode: ChatMode,
    policy: Policy,
    loaded: Loaded,
    clock: Clock,
) -> Step:
    """A question: look it up, decide, then refuse or answer."""
    question = resolve_question(turn, loaded)
    try:
        material = await look_up(deps, turn, loaded, question, clock)
    except LecternError as exc:
        yield ErrorEvent(reason=exc.reason, message=exc.message, retryable=True)
        return
    retrieved = material.retrieved
    evidence = Evidence(
        verdict=retrieved.confidence, has_sources=bool(retrieved.sources),
        answer_margin=retrieved.answer_margin(),
    )  # fmt: skip
    decision = decide(evidence, policy, general=question.general)
    prompt = None
    if decision.action != "refuse":
        prompt = compose(deps, turn, question, material, loaded.history)
        offer(retrieved, prompt)
    yield SourcesEvent(sources=retrieved.sources, reranked=retrieved.reranked)
    if turn.delay_s > 0:  # the plan's soft limit paces the turn
        await asyncio.sleep(turn.delay_s)
        clock.timings["rate_limit_delay_ms"] = round(turn.delay_s * 1000, 2)
    if prompt is None:
        steps = refuse(deps, turn, question, decision, clock)
    else:
        steps = answer(deps, turn, mode, material, decision, policy, prompt, clock)
    async with aclosing(steps) as ending_step:
        async for item in ending_step:
            yield item


def resolve_question(turn: TurnInput, loaded: Loaded) -> Question:
    """The student's question; after a gap, "explain it in general" means the one before."""
    rows = loaded.rows
    general = bool(rows) and rows[-1].confidence_band == "gap"
    if general and asks_for_general_explanation(turn.text):
        return Question(previous_question(rows), general=True)
    return Question(turn.text)


async def look_up(
    deps: ChatDeps, turn: TurnInput, loaded: Loaded, question: Question, clock: Clock
) -> Material:
    """Retrieve and re-rank sources (none for a general explanation) while memory recalls."""
    timings = clock.timings

    async def recall() -> list[RecalledMemory]:
        begun = time.perf_counter()
        memories = await recall_memories(deps, principal=turn.principal, query=question.text)
        timings["memory_ms"] = elapsed_ms(begun)
        return memories

    memory_task = asyncio.create_task(recall())
    try:
        retrieved = Retrieved()
        if not question.general:
            lookup = Lookup(
                principal=turn.principal, session=turn.session, query=question.text,
                history=[Turn(role=h.role, text=h.text) for h in loaded.history],
                persona=turn.persona, cited_document_ids=cited_documents(loaded.rows),
                idf_words=candidate_words(turn.text),
            )  # fmt: skip
            found = await retrieve_candidates(deps, lookup, timings)
            retrieved = await rerank(deps, lookup, found, timings)
        return Material(retrieved, await memory_task)
    finally:
        if not memory_task.done():
            memory_task.cancel()


def compose(
    deps: ChatDeps,
    turn: TurnInput,
    question: Question,
    material: Material,
    history: list[PromptTurn],
) -> Prompt:
    """The prompt: the session's system prompt (persona, memories), the sources, the history,
    within the context budget."""
    retrieved = material.retrieved
    memories = [m.text for m in material.remembered]
    system = turn.system_prompt(memories=memories, with_sources=not question.general)
    sources = [
        PromptSource(
            label=s.label,
            title=s.title,
            text=retrieved.texts[s.label],
            pages=pages_label(s.page_start, s.page_end, s.slide),
            section=s.section,
            score=s.score,
            answer=s.answer,
        )
        for s in retrieved.sources
    ]
    built = build_prompt(
        system=system, question=question.text, history=history, sources=sources,
        budget=deps.settings.context_token_budget,
    )  # fmt: skip
    built.memories = list(memories)
    built.web_search = turn.web_search
    return built


def offer(retrieved: Retrieved, prompt: Prompt) -> None:
    """Sources trimmed to fit the context budget are not offered (nor citable)."""
    kept = {s.label for s in prompt.sources}
    retrieved.sources = [s for s in retrieved.sources if s.label in kept]
    retrieved.texts = {k: v for k, v in retrieved.texts.items() if k in kept}


# ---------------------------------------------------------------- refuse


async def refuse(
    deps: ChatDeps, turn: TurnInput, question: Question, decision: Decision, clock: Clock
) -> Step:
    """No material good enough: say so honestly (and what the web says, when the tenant lets
    the model search it); the knowledge gap is recorded."""
    principal, session = turn.principal, turn.session
    related = await related_topics(
        deps.broker, deps.settings, principal.tenant_id, session.subject, limit=5
    )
    topic = guess_topic(question.text, session, [])
    related = [t for t in related if t != topic][:5]
    text = await gap_text(deps, turn, question.text, related)
    yield TokenEvent(text=text, origin="gateway")
    web = WebPart()
    if turn.web_search and deps.web_streamer is not None:
        # no course material: what the web says, cited [W#] and set apart from the course
        web_step = web_answer(deps, turn, question.text, offset=len(text), into=web)
        async with aclosing(web_step) as web_events:
            async for event in web_events:
                yield event
        text += web.text
    yield ConfidenceEvent(**decision.confidence.model_dump())
    yield Ending(
        text, decision.confidence, "gap", citations=web.citations, usage=Usage(model=web.usage),
        usage_hidden=True, topic=topic, gap=GapRecord(question.text, topic, related),
        quality=True, persona=turn.persona_label,
    )  # fmt: skip


# ---------------------------------------------------------------- answer


@dataclass
class Draft:
    """The answer as it streams: the text shown, the model's own text, what it cites."""

    #: said with the answer's first words (not before: an answerer that finds its sources do
    #: not answer speaks alone, in one voice)
    opening: str
    #: what the question is about, in the material's words (memory names topics with them)
    asked_about: list[str]
    #: a topic the student has mastered: at most :data:`BRIEF_SENTENCES`
    brief: bool
    general: bool
    texts: dict[str, str]
    by_label: dict[str, Source]
    threshold: float
    #: the student's question (a table row cited marks the cell it asks for)
    question: str = ""
    opening_due: bool = False
    text: str = ""
    model_text: str = ""
    said: int = 0
    no_support: bool = False
    tracker: SentenceTracker = field(default_factory=lambda: SentenceTracker(text="", _done=0))
    checked: list[CheckedCitation] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    web: list[Citation] = field(default_factory=list)
    supports: list[tuple[int, int, str, list[str]]] = field(default_factory=list)
    finished: Finished = field(default_factory=lambda: Finished(answered_by="unknown"))

    def __post_init__(self) -> None:
        self.opening_due = bool(self.opening)


async def answer(
    deps: ChatDeps,
    turn: TurnInput,
    mode: ChatMode,
    material: Material,
    decision: Decision,
    policy: Policy,
    prompt: Prompt,
    clock: Clock,
) -> Step:
    """Stream the model's answer, cite it as its sentences end, settle its band, close it
    (a caveat when the band fell, a check question in tutor and drill) and end the turn."""
    draft = await plan_answer(deps, turn, mode, material, decision)
    async with aclosing(stream_answer(deps, prompt, draft, clock)) as streamed:
        async for event in streamed:
            yield event
    for event in cite(draft):
        yield event
    sentences, _ = split_cited_sentences(draft.model_text, final=True)
    grounding = 0.0 if draft.general else grounding_of(draft.checked, sentences=sentences)
    reported = draft.finished.usage
    no_support = draft.no_support or (reported is not None and reported.outcome == "no_support")
    final = settle(decision, Support(grounding, no_support=no_support), policy)
    # a caveat qualifies an answer; a "the material does not answer this" needs none
    closing = caveat(decision.band, final.band) if final.action == "answer" else ""
    if closing:
        # the opening was said for the prior band: the copy ends in the final band's words
        draft.text += closing
        yield TokenEvent(text=closing, origin="gateway")
    check = None
    if mode.asks_checks and final.action == "answer" and final.band != "low":
        check = await check_question(deps, turn, material.retrieved, draft)
    if check is not None:
        asking = tutoring.asking_text(check, lead="\n\nCheck your understanding: ")
        draft.text += asking
        yield TokenEvent(text=asking, origin="gateway")
        yield CheckEvent(phase="asked", question=check.prompt, kind=check.kind)
    yield ConfidenceEvent(**final.confidence.model_dump())
    clock.total()
    yield await answered(deps, turn, material, prompt, draft, final, check)


async def plan_answer(
    deps: ChatDeps, turn: TurnInput, mode: ChatMode, material: Material, decision: Decision
) -> Draft:
    """The answer's opening (its band's words; a struggle revisited, a mastered topic kept
    brief) and what the question is about."""
    retrieved, general = material.retrieved, decision.action == "explain_generally"
    # the question's words' idf came with the search (none for a general explanation)
    idf = retrieved.idf
    texts = [retrieved.texts[s.label] for s in retrieved.sources if s.label in retrieved.texts]
    asked_about = topics(turn.text, texts, idf=idf)
    opening = GENERAL_OPENING if general else preamble(decision.band)
    # what memory says of it: a struggle is revisited (tutor: with a check), a topic the
    # student has mastered is not explained again at length
    remembered = material.remembered
    revisit = None if general else remembered_on(remembered, "struggle", asked_about)
    known = None if general else remembered_on(remembered, "mastered", asked_about)
    if revisit is not None and mode.revisits_struggles:
        opening = f"Last time you found {revisit.topic} hard: let's go step by step.\n\n{opening}"
    elif known is not None:
        opening = f"You've already shown you know {known.topic}, so briefly:\n\n{opening}"
    return Draft(
        opening=opening, asked_about=asked_about, brief=known is not None, general=general,
        texts=retrieved.texts, by_label={s.label: s for s in retrieved.sources},
        threshold=deps.settings.support_threshold, question=turn.text,
    )  # fmt: skip


async def stream_answer(
    deps: ChatDeps, prompt: Prompt, draft: Draft, clock: Clock
) -> AsyncGenerator[BaseModel, None]:
    """The model's answer as it comes: its words, and each sentence's citations as it ends."""
    begun = time.perf_counter()
    stream = deps.streamer(prompt)
    try:
        async for piece in stream:
            events = take(draft, piece)
            if events and isinstance(piece, TextDelta) and "first_token_ms" not in clock.timings:
                clock.timings["first_token_ms"] = elapsed_ms(clock.started)
                clock.timings["model_first_token_ms"] = elapsed_ms(begun)
            for event in events:
                yield event
    finally:
        # a client disconnect cancels this generator: closing the stream cancels the model call
        with anyio.CancelScope(shield=True):
            await stream.aclose()
    clock.timings["generation_ms"] = elapsed_ms(begun)


def take(draft: Draft, piece: Piece) -> list[BaseModel]:
    """One piece of the model's stream into the draft; the events it makes."""
    if isinstance(piece, Verdict):
        if piece.outcome == "no_support" and draft.opening_due and not draft.general:
            draft.opening_due, draft.opening = False, ""
        draft.no_support = draft.no_support or piece.outcome == "no_support"
        return []
    if isinstance(piece, Grounding):
        cited = web_citations(piece)
        draft.web.extend(cited)
        draft.supports.extend(spans_of(piece))
        return [CitationEvent(citation=c) for c in cited]
    if isinstance(piece, Finished):
        draft.finished = piece
        return []
    if not piece.text or _said_enough(draft):
        return []
    events: list[BaseModel] = []
    if draft.opening_due:
        draft.opening_due = False
        draft.text = draft.opening
        draft.tracker = SentenceTracker(text=draft.opening, _done=len(draft.opening))
        events.append(TokenEvent(text=draft.opening, origin="gateway"))
    begins, text = len(draft.tracker.text), piece.text
    checks: list[BaseModel] = []
    # a sentence is known to have ended once the text after it comes, so a brief answer's
    # last sentence is cut where it ends, however the model's deltas fall
    for sentence in draft.tracker.feed(piece.text):
        if _said_enough(draft):
            break
        draft.said += 1
        checked = check_sentence(sentence, draft.texts, threshold=draft.threshold)
        checks.extend(check_citations(draft, checked))
        if _said_enough(draft):
            text = text[: max(0, sentence.end - begins)].rstrip()
    if text:
        draft.text += text
        draft.model_text += text
        events.append(TokenEvent(text=text))
    return events + checks


def _said_enough(draft: Draft) -> bool:
    """A brief answer (a topic the student has mastered) has said its sentences."""
    return draft.brief and draft.said >= BRIEF_SENTENCES


def check_citations(draft: Draft, checked: Sequence[CheckedCitation]) -> list[BaseModel]:
    """A sentence's checked [T#] citations, kept in the draft and sent."""
    events: list[BaseModel] = []
    for c in checked:
        draft.checked.append(c)
        citation = textbook_citation(c, draft.by_label, draft.texts, question=draft.question)
        draft.citations.append(citation)
        events.append(CitationEvent(citation=citation))
    return events


def cite(draft: Draft) -> list[BaseModel]:
    """After the stream: the last sentence's citations, and each web source on the spans it
    supports (the stored answer carries each [W#] after its span, as the client shows it)."""
    events: list[BaseModel] = []
    # a brief answer cut after its last sentence leaves the rest unsaid, and uncited
    for sentence in [] if _said_enough(draft) else draft.tracker.finish():
        checked = check_sentence(sentence, draft.texts, threshold=draft.threshold)
        events.extend(check_citations(draft, checked))
    web_by_label = {w.label: w for w in draft.web}
    shift = len(draft.opening)
    for start, end, span, labels in draft.supports:
        for label in labels:
            if label in web_by_label:
                spanned = web_by_label[label].model_copy(
                    update={"span_start": start + shift, "span_end": end + shift, "text": span}
                )
                draft.citations.append(spanned)
                events.append(CitationEvent(citation=spanned))
    if draft.supports:
        marks = [(end, labels) for _, end, _, labels in draft.supports]
        draft.text = draft.opening + generators.insert_labels(draft.model_text, marks)
    return events


async def check_question(
    deps: ChatDeps, turn: TurnInput, retrieved: Retrieved, draft: Draft
) -> TutorCheck | None:
    """Tutor and drill: a question on what the sources say, judged when the student replies."""
    cited = [(c.label, c.sentence.text) for c in draft.checked if c.valid and c.supported]
    already = await repo.asked_checks(
        pool=deps.pool, tenant_id=turn.principal.tenant_id, session_id=turn.session.id
    )
    cited = await tutoring.best_answering_first(deps.reader, cited, asked=turn.text)
    return tutoring.check_for_answer(
        retrieved.sources, retrieved.texts, cited, asked=turn.text, topics=draft.asked_about,
        already=already,
    )  # fmt: skip


async def answered(
    deps: ChatDeps,
    turn: TurnInput,
    material: Material,
    prompt: Prompt,
    draft: Draft,
    final: Decision,
    check: TutorCheck | None,
) -> Ending:
    """The ending of an answered turn; an answer that said the material does not answer is a
    knowledge gap as much as one the retrieval found (the teacher's report, the memory)."""
    session = turn.session
    web = [w for w in draft.web if not any(c.label == w.label for c in draft.citations)]
    usage = Usage(
        model=draft.finished.usage, prompt_tokens_estimate=prompt.tokens,
        dropped_history=prompt.dropped_history, dropped_sources=prompt.dropped_sources,
    )  # fmt: skip
    topic = guess_topic(turn.text, session, material.retrieved.topic_tags)
    gap = None
    if final.knowledge_gap:
        related = await related_topics(
            deps.broker, deps.settings, turn.principal.tenant_id, session.subject, limit=5
        )
        gap = GapRecord(turn.text, topic, related)
    return Ending(
        draft.text, final.confidence, draft.finished.answered_by,
        citations=draft.citations + web,
        unsupported=list(dict.fromkeys(c.label for c in draft.checked if not c.supported)),
        usage=usage, tutor_check=check, topic=topic, topics=draft.asked_about, gap=gap,
        quality=True, persona=turn.persona_label,
        memories_used=prompt.memories,
    )  # fmt: skip


def textbook_citation(
    checked: CheckedCitation,
    by_label: dict[str, Source],
    texts: dict[str, str] | None = None,
    *,
    question: str = "",
) -> Citation:
    """A checked [T#] citation as the client sees it (an invalid label names no source),
    with its source's answer span when the cited sentence says the answer's words, and the
    cell ``question`` asks for when the sentence quotes a table row of the source."""
    source = by_label.get(checked.label)
    valid = source is not None and checked.valid
    answer = source.answer if source is not None and valid else None
    chunk = (texts or {}).get(checked.label)
    if answer is not None and (
        chunk is None or not said_in(chunk[answer.start : answer.end], checked.sentence.text)
    ):
        answer = None
    cell = None
    if chunk is not None and valid and question:
        found = cited_cell(question, checked.sentence.text, chunk)
        cell = TableCell(start=found[0], end=found[1], header=found[2]) if found else None
    return Citation(
        label=checked.label, kind="textbook",
        chunk_id=source.chunk_id if source and valid else None,
        document_id=source.document_id if source and valid else None,
        title=source.title if source and valid else None,
        span_start=checked.sentence.start, span_end=checked.sentence.end,
        text=checked.sentence.text, support=checked.support, supported=checked.supported,
        valid=checked.valid, answer=answer, cell=cell,
    )  # fmt: skip


def said_in(span: str, sentence: str) -> bool:
    """Whether ``sentence`` says the words of ``span`` in their order (case, spacing and
    punctuation aside)."""
    words = " ".join(text_words(span.casefold()))
    said = " ".join(text_words(sentence.casefold()))
    return bool(words) and f" {words} " in f" {said} "


# ---------------------------------------------------------------- modes


class ChatMode:
    """Chat: every message is a question (or small talk)."""

    #: an answer ends with a check question on its sources
    asks_checks = False
    #: a struggle the student had is named in the answer's opening
    revisits_struggles = False

    async def own_reply(
        self, deps: ChatDeps, turn: TurnInput, loaded: Loaded, clock: Clock
    ) -> Step | None:
        """The mode's own reply to this message, before it is taken as a question (None)."""
        return None

    async def after_check(self, deps: ChatDeps, turn: TurnInput) -> tuple[TutorCheck | None, str]:
        """What follows a judged check: the next check question (or None) and the words."""
        return None, "\n\nAsk me your next question when you're ready."


class TutorMode(ChatMode):
    """Tutor: answers end with a check question; the reply to one is judged first."""

    asks_checks = True
    revisits_struggles = True

    async def own_reply(
        self, deps: ChatDeps, turn: TurnInput, loaded: Loaded, clock: Clock
    ) -> Step | None:
        """Judge the reply to a pending check; a new question instead skips it."""
        pending = loaded.rows[-1].pending_check() if loaded.rows else None
        if pending is None:
            return None
        if not tutoring.is_new_question(turn.text):
            return check_reply(deps, turn, self, pending, clock)
        async with deps.pool.acquire() as conn, conn.transaction():
            await tutoring.settle_skipped(
                conn, tenant_id=turn.principal.tenant_id, user_id=turn.principal.user_id,
                pending=pending, session_id=turn.session.id,
            )  # fmt: skip
        return None


class DrillMode(TutorMode):
    """Drill: practice questions one after another, each reply judged."""

    revisits_struggles = False

    async def own_reply(
        self, deps: ChatDeps, turn: TurnInput, loaded: Loaded, clock: Clock
    ) -> Step | None:
        """A pending check judged, else (no question asked) the next practice question."""
        reply = await super().own_reply(deps, turn, loaded, clock)
        if reply is None and not tutoring.is_new_question(turn.text):
            return practice_reply(deps, turn, clock)
        return reply

    async def after_check(self, deps: ChatDeps, turn: TurnInput) -> tuple[TutorCheck | None, str]:
        """The next practice question."""
        following = await tutoring.next_practice_question(deps, turn)
        if following is None:
            return None, "\n\nThat was the last practice question on this material."
        return following, tutoring.asking_text(following, lead="\n\nNext: ")


MODES: dict[str, ChatMode] = {"chat": ChatMode(), "tutor": TutorMode(), "drill": DrillMode()}


def mode_for(name: str) -> ChatMode:
    """The session mode's step object, chosen once per turn."""
    return MODES.get(name, MODES["chat"])


async def check_reply(
    deps: ChatDeps, turn: TurnInput, mode: ChatMode, pending: PendingCheck, clock: Clock
) -> Step:
    """Judge the reply to a check question, show the passage, then move on."""
    check = pending.check
    source = tutoring.check_source(check)
    yield SourcesEvent(sources=[source])
    judged = await tutoring.judge(check, turn.text, writer=deps.quiz_writer, embedder=deps.embedder)
    yield CheckEvent(
        phase="judged", question=check.prompt, kind=check.kind, verdict=judged.verdict,
        expected=check.answer, evidence=check.evidence, chunk_id=source.chunk_id,
    )  # fmt: skip
    text = tutoring.feedback(check, judged)
    yield TokenEvent(text=text, origin="gateway")
    citation = tutoring.feedback_citation(source, text)
    yield CitationEvent(citation=citation)
    following, closing = await mode.after_check(deps, turn)
    text += closing
    yield TokenEvent(text=closing, origin="gateway")
    if following is not None:
        yield CheckEvent(phase="asked", question=following.prompt, kind=following.kind)
    yield ConfidenceEvent(**CERTAIN.model_dump())
    clock.total()
    message_id, usage = uuid.uuid4(), Usage(verdict=judged.verdict, judged_by=judged.by)
    yield Ending(
        text, CERTAIN, "tutor-check", citations=[citation], message_id=message_id, usage=usage,
        tutor_check=following, topic=check.topic, topics=[check.topic],
        settles=SettledCheck(pending.message_id, judged.verdict, judged.by, turn.text),
        events=[tutoring.judged_attempt(turn, pending, source, judged, attempt_id=message_id)],
    )  # fmt: skip


async def practice_reply(deps: ChatDeps, turn: TurnInput, clock: Clock) -> Step:
    """Drill: put the next practice question (no question asked by the student)."""
    following = await tutoring.next_practice_question(deps, turn)
    yield SourcesEvent(sources=[] if following is None else [tutoring.check_source(following)])
    if following is None:
        text = (
            "There is no practice material for this session yet: your teacher's documents "
            "have no questions or definitions to drill. Ask me anything about the course."
        )
        # nothing to drill is a refusal for want of material, decided as any turn's is
        _, policy = resolve(deps, turn)
        confidence = decide(Evidence(verdict=no_material(), has_sources=False), policy).confidence
    else:
        text, confidence = tutoring.asking_text(following, lead="Practice question: "), CERTAIN
    yield TokenEvent(text=text, origin="gateway")
    if following is not None:
        yield CheckEvent(phase="asked", question=following.prompt, kind=following.kind)
    yield ConfidenceEvent(**confidence.model_dump())
    clock.total()
    topic = None if following is None else following.topic
    yield Ending(text, confidence, "drill", tutor_check=following, topic=topic)


# ---------------------------------------------------------------- finish


async def finish(
    deps: ChatDeps, turn: TurnInput, loaded: Loaded, clock: Clock, ending: Ending
) -> DoneEvent:
    """Store the turn's answer, write its outbox events (the gap, the settled check, the
    turn) in the same transaction, and say ``done``. Only the run that owns the turn stores
    it; a resumed turn's earlier run may have stored it already (``done`` names that one)."""
    principal, session = turn.principal, turn.session
    confidence = ending.confidence
    async with deps.pool.acquire() as conn, conn.transaction():
        stored = await claim_answer(conn, turn, ending.message_id)
        if stored == ending.message_id:  # else an earlier run of this turn stored it
            await repo.insert_message(
                pool=conn, message_id=stored, session_id=session.id,
                tenant_id=principal.tenant_id, user_id=principal.user_id, role="assistant",
                content=ending.text, citations=repo.citations_json(ending.citations),
                confidence=confidence.score, band=confidence.band,
                answered_by=ending.answered_by, usage=ending.usage.as_json(),
                timings=clock.timings,
                tutor_check=None if ending.tutor_check is None else ending.tutor_check.stored(),
            )  # fmt: skip
            await write_events(conn, turn, loaded, clock, ending)
    return DoneEvent(
        message_id=stored, user_message_id=loaded.user_message_id, session_id=session.id,
        citations=ending.citations, unsupported=ending.unsupported, band=confidence.band,
        confidence=confidence.score, knowledge_gap=ending.gap is not None,
        answered_by=ending.answered_by, persona=ending.persona,
        memories_used=ending.memories_used,
        usage={} if ending.usage_hidden else ending.usage.as_json(),
        timings_ms=clock.timings,
    )  # fmt: skip


async def write_events(
    conn: Connection, turn: TurnInput, loaded: Loaded, clock: Clock, ending: Ending
) -> None:
    """What a stored answer writes beside it: the knowledge gap, the settled check and its
    events, ``chat.turn.completed`` (every turn is announced, so memory's distillation finds
    them all), and the quality aggregates."""
    principal, session, confidence = turn.principal, turn.session, ending.confidence
    gap = ending.gap
    if gap is not None:
        await record_gap(
            conn, turn, gap_id=uuid.uuid4(), question=gap.question, topic=gap.topic,
            confidence=confidence.score, message_id=ending.message_id, related=gap.related,
        )  # fmt: skip
    if ending.settles is not None:
        await repo.settle_check(
            pool=conn, tenant_id=principal.tenant_id, message_id=ending.settles.message_id,
            outcome=ending.settles.outcome(),
        )  # fmt: skip
    for event in ending.events:
        await enqueue(conn, event)
    await enqueue(
        conn,
        turn_completed(
            turn, loaded.user_message_id, ending.message_id, ending.text, confidence,
            ending.citations, ending.answered_by, topic=ending.topic, topics=ending.topics,
            knowledge_gap=gap is not None,
        ),
    )  # fmt: skip
    if ending.quality:
        await quality.record_turn(
            conn,
            quality.Dimensions.of(
                principal.tenant_id, persona=session.persona_slug, subject=session.subject,
                class_id=session.class_id,
            ),
            band=confidence.band,
            cited_documents=list(
                {c.document_id for c in ending.citations if c.document_id and c.valid}
            ),
            fallback=ending.usage.fallback,
            ttft_ms=clock.timings.get("first_token_ms"),
            retrieval_ms=clock.timings.get("retrieve_ms"),
            gap_topic=gap.topic if gap is not None else None,
        )  # fmt: skip
