"""Tutoring beyond a prompt: check questions that are asked, judged and remembered.

- **Tutor mode**: an answer ends with a check question the gateway draws from the answer's
  own sources (the quiz generator: a blank to fill, a statement to call true or false), the
  same online and offline. The student's next message is judged against the sources (right,
  partly, wrong, with the passage) before anything else; a new question instead skips it.
- **Drill mode**: practice questions one after another, the material's ingest-time Q&A
  pairs first, then generated ones; each reply is judged, then the next question comes.

A check is stored with the assistant message that asked it (``chat_messages.tutor_check``:
status ``pending`` until judged or skipped). A judged check is a quiz attempt of one
question for the memory service (``quiz.attempted``, through the outbox): wrong answers
become struggles, right ones build towards mastered.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lectern_common.db.types import Connection
from lectern_common.events import MaterialFilter, QuizAnswerResult, QuizAttempted
from lectern_common.outbox import enqueue
from lectern_common.text import split_sentences
from lectern_gateway.chat import repository as repo
from lectern_gateway.chat.sse import (
    Citation,
    Source,
)
from lectern_gateway.chat.turn_input import ChatDeps, PendingCheck, TurnInput, TutorCheck
from lectern_gateway.classes.membership import student_classes
from lectern_gateway.index import material
from lectern_gateway.study import generator
from lectern_gateway.study.grading import (
    choice_is_right,
    content_words,
    embed_similarities,
    normalise,
    short_answer_is_right,
)

if TYPE_CHECKING:
    from lectern_answerer import SentenceReader

Verdict = Literal["right", "partly", "wrong", "skipped"]

#: the kinds of question a typed chat reply can answer
CHECK_KINDS: tuple[generator.QuestionKind, ...] = ("short_answer", "true_false")
#: a source sentence is the one an answer's sentence states when they share this much
#: (Jaccard of content words; the offline answerer quotes, a model paraphrases)
KEY_STATEMENT_OVERLAP = 0.3
#: practice questions drawn per drill turn (the session's material, its Q&A pairs first)
DRILL_POOL = 200

_QUESTION_START = re.compile(
    r"^\s*(what|why|how|when|where|who|whom|which|whose|can|could|would|should|is|are|does|"
    r"do|did|explain|describe|tell me|give me|define|compare|list)\b",
    re.IGNORECASE,
)
_SKIP = {"skip", "pass", "next", "next question", "skip it", "no idea"}
#: not an answer at all: the check is skipped (evidence against mastery, not of a struggle)
_NOT_AN_ANSWER = {
    "ok", "okay", "k", "thanks", "thank you", "ok thanks", "okay thanks", "thx", "ty", "cool",
    "ok cool", "nice", "great", "got it", "ok got it", "alright", "sure", "hmm", "later",
}  # fmt: skip
#: an honest "I don't know" is an answer: a wrong one
_DONT_KNOW = {"i don't know", "i dont know", "dont know", "don't know", "idk", "no clue"}
_NORMALISED = {
    name: {normalise(p) for p in phrases}
    for name, phrases in (
        ("skip", _SKIP),
        ("no answer", _NOT_AN_ANSWER),
        ("don't know", _DONT_KNOW),
    )
}
_TRUE = {"true", "t", "yes", "y", "right", "correct"}
_FALSE = {"false", "f", "no", "n", "wrong", "incorrect"}


@dataclass(frozen=True)
class Judged:
    """A reply to a check question, judged."""

    verdict: Verdict
    by: str  # rules | model


def check_of(question: generator.Question, *, topic: str | None = None) -> TutorCheck:
    """A generated question as a check question; ``topic`` is what it tests (the student's
    question's topic), else the section it comes from."""
    chunk = question.chunk
    return TutorCheck(
        question_id=question.id, kind=question.kind, prompt=question.prompt,
        answer=question.answer, accepted=list(question.accepted),
        options=list(question.options), evidence=question.evidence,
        topic=topic or question.topic, chunk_id=chunk.id, document_id=chunk.document_id,
        title=chunk.document_title, section=" > ".join(chunk.section_path) or None,
        page_start=chunk.page_start, page_end=chunk.page_end,
    )  # fmt: skip


def check_for_sources(
    sources: Sequence[Source], texts: dict[str, str], *, asked: Collection[str] = ()
) -> TutorCheck | None:
    """A check question on what the answer's best sources say (not one of the ``asked``
    question ids), or None if they state no definition or quantity to ask about."""
    chunks = [_source_chunk(s, texts[s.label]) for s in sources[:3] if s.label in texts]
    questions = generator.generate(chunks, num_questions=1 + len(asked), kinds=CHECK_KINDS)
    fresh = [q for q in questions if q.id not in asked]
    return check_of(fresh[0]) if fresh else None


def _source_chunk(source: Source, text: str) -> generator.SourceChunk:
    return generator.SourceChunk(
        id=source.chunk_id, document_id=source.document_id, document_title=source.title,
        kind="text", text=text,
        section_path=tuple(source.section.split(" > ")) if source.section else (),
        page_start=source.page_start, page_end=source.page_end,
    )  # fmt: skip


def key_statement(answer_sentence: str, source_text: str) -> str | None:
    """The sentence of ``source_text`` that an answer's sentence states (most shared words)."""
    said = set(content_words(answer_sentence))
    best, best_overlap = None, 0.0
    for sentence in split_sentences(source_text):
        words = set(content_words(sentence))
        if not words:
            continue
        overlap = len(said & words) / len(said | words)
        if overlap > best_overlap:
            best, best_overlap = sentence, overlap
    return best if best_overlap >= KEY_STATEMENT_OVERLAP else None


async def best_answering_first(
    reader: SentenceReader | None, cited: Sequence[tuple[str, str]], *, asked: str
) -> list[tuple[str, str]]:
    """The answer's cited (label, sentence) pairs, the one the reader reads as answering
    ``asked`` best first (ties keep the answer's order), for ``check_for_answer`` to ask
    about the sentence that taught what was asked rather than the answer's first one (on the
    memory benchmark's tutor turns, the check then carries more of the question's terms:
    docs/study.md); as they are without a reader."""
    if reader is None or len(cited) < 2:
        return list(cited)
    logits = await reader.score_logits(asked, [sentence for _, sentence in cited], kind="sentence")
    order = sorted(range(len(cited)), key=lambda i: -float(logits[i]))
    return [cited[i] for i in order]


def check_for_answer(
    sources: Sequence[Source],
    texts: dict[str, str],
    cited: Sequence[tuple[str, str]],
    *,
    asked: str,
    topics: Sequence[str] = (),
    already: Collection[str] = (),
) -> TutorCheck | None:
    """A check question about what was just taught: drawn from the statement the answer
    rests on (its first supported citation's sentence, ``cited`` = (label, answer sentence)
    pairs in order), else from the cited passage, else from the best sources, never one the
    session asked ``already`` (question ids); its topic is the student's question's."""
    by_label = {s.label: s for s in sources}
    topic = topics[0] if topics else None
    for label, sentence in cited:
        source = by_label.get(label)
        if source is None or label not in texts:
            continue
        statement = key_statement(sentence, texts[label])
        if statement is None:
            continue
        chunk = _source_chunk(source, texts[label])
        made = generator.statement_check(statement, chunk, asked=asked)
        if made is not None and made.id not in already:
            return check_of(made, topic=topic)
    cited_first = [by_label[label] for label, _ in cited if label in by_label]
    ordered = list({s.label: s for s in [*cited_first, *sources[:3]]}.values())
    check = check_for_sources(ordered, texts, asked=already)
    return None if check is None else check.model_copy(update={"topic": topic or check.topic})


def asking_text(check: TutorCheck, *, lead: str) -> str:
    """How a check question is put to the student."""
    prompt = check.prompt
    if check.kind == "true_false":
        return f"{lead}{prompt} (Reply true or false.)"
    return f"{lead}{prompt}"


def is_new_question(text: str) -> bool:
    """Whether a reply to a check question is rather a new question (the check is skipped)."""
    stripped = text.strip()
    words = stripped.split()
    if normalise(stripped) in _NORMALISED["skip"]:
        return False
    if normalise(stripped).rstrip("!.") in _NORMALISED["no answer"]:
        return False
    if stripped.endswith("?") and len(words) >= 3:
        return True
    return bool(_QUESTION_START.match(stripped)) and len(words) >= 4


def wants_to_skip(text: str) -> bool:
    """ "skip", "next", "ok thanks": the check counts as not answered."""
    said = normalise(text).rstrip("!.")
    return said in _NORMALISED["skip"] or said in _NORMALISED["no answer"]


async def judge(
    check: TutorCheck,
    reply: str,
    *,
    writer: Any = None,
    embedder: Any = None,
) -> Judged:
    """Right, partly or wrong: the quiz rules (and the local model's cosine), then the
    hosted model's verdict on a typed answer when one is configured."""
    if wants_to_skip(reply):
        return Judged("skipped", "rules")
    if normalise(reply).rstrip("!.") in _NORMALISED["don't know"]:
        return Judged("wrong", "rules")
    answer = check.answer
    if check.kind == "true_false":
        said = normalise(reply)
        given = "true" if said in _TRUE else "false" if said in _FALSE else said
        return Judged("right" if choice_is_right(answer, given) else "wrong", "rules")
    accepted = check.accepted or [answer]
    similarities = None
    if embedder is not None:
        (similarities,) = await embed_similarities(embedder, [(accepted[0], reply, check.prompt)])
    right = short_answer_is_right(
        accepted, reply, question=check.prompt, evidence=check.evidence,
        similarities=similarities,
    )  # fmt: skip
    by = "rules"
    if not right and writer is not None:
        verdicts = await writer.judge([(check.prompt, answer, check.evidence, reply)])
        if verdicts is not None:
            right, by = verdicts[0], "model"
    if right:
        return Judged("right", by)
    expected = content_words(answer) - content_words(check.prompt)
    overlap = expected & content_words(reply)
    return Judged("partly" if overlap else "wrong", by)


def feedback(check: TutorCheck, judged: Judged) -> str:
    """The tutor's reply to a judged answer, citing the passage as [T1]."""
    evidence = check.evidence.strip()
    if judged.verdict == "right":
        return f"Right! {evidence} [T1]"
    if judged.verdict == "skipped":
        return f"No problem. The answer was {check.answer}: {evidence} [T1]"
    if judged.verdict == "partly":
        return f"Partly right. The full answer is: {check.answer}. {evidence} [T1]"
    return f"Not quite: the answer is {check.answer}. {evidence} [T1]"


def check_source(check: TutorCheck) -> Source:
    """The passage a check question came from, as the turn's only source [T1]."""
    return Source(
        label="T1", chunk_id=check.chunk_id, document_id=check.document_id, title=check.title,
        page_start=check.page_start, page_end=check.page_end, section=check.section,
        score=1.0,
    )  # fmt: skip


async def next_practice_question(deps: ChatDeps, turn: TurnInput) -> TutorCheck | None:
    """Drill: the next question this session has not asked, Q&A pairs of the material first."""
    session, principal = turn.session, turn.principal
    selected = MaterialFilter(
        collections=["educational"], subject=session.subject, module=session.module_tag,
        class_id=session.class_id, visible_classes=await student_classes(deps.pool, principal),
    )  # fmt: skip
    rows = await material(deps.broker, deps.settings, principal.tenant_id, selected, purpose="quiz")
    chunks = [
        generator.SourceChunk.from_row(r)
        for r in rows
    ]  # fmt: skip
    asked = await repo.asked_checks(
        pool=deps.pool, tenant_id=principal.tenant_id, session_id=session.id
    )
    by_id = {c.id: c for c in chunks}
    paired = [
        generator.qa_question(c, by_id.get(c.parent_chunk_id) if c.parent_chunk_id else None)
        for c in chunks
        if c.kind == "qa"
    ]
    prepared = [q for q in paired if q is not None]
    generated = generator.generate(
        [c for c in chunks if c.kind != "qa"], num_questions=DRILL_POOL, kinds=CHECK_KINDS
    )
    for question in [*prepared, *generated]:
        if question.id not in asked:
            return check_of(question)
    return None


def feedback_citation(source: Source, text: str) -> Citation:
    """The feedback on a judged check, cited to the passage the check came from [T1]."""
    return Citation(
        label="T1", kind="textbook", chunk_id=source.chunk_id, document_id=source.document_id,
        title=source.title, span_start=0, span_end=len(text), text=text, support=1.0,
        supported=True,
    )  # fmt: skip


def section_tested(check: TutorCheck) -> str | None:
    """The section a check's statement comes from, for memory to count right checks by across
    sessions; None when the material has no heading below its title (the whole document is
    no one thing a student masters)."""
    section = (check.section or "").strip()
    if not section or section.casefold() == check.title.strip().casefold():
        return None
    return section


def judged_attempt(
    turn: TurnInput,
    pending: PendingCheck,
    source: Source,
    judged: Judged,
    *,
    attempt_id: uuid.UUID,
) -> QuizAttempted:
    """A judged check as a quiz attempt of one question, for the memory service."""
    principal, check = turn.principal, pending.check
    return QuizAttempted(
        tenant_id=principal.tenant_id, attempt_id=attempt_id, quiz_id=pending.message_id,
        user_id=principal.user_id, correct=int(judged.verdict == "right"), total=1,
        session_id=turn.session.id, results=[
            QuizAnswerResult(
                question_id=check.question_id, kind=check.kind,
                correct=judged.verdict == "right", outcome=judged.verdict,
                topic=check.topic, document_id=source.document_id,
                chunk_ids=[source.chunk_id], section=section_tested(check),
                document_title=check.title,
            )
        ],
    )  # fmt: skip


def skipped_attempt(
    tenant_id: str, user_id: str, pending: PendingCheck, session_id: uuid.UUID | None = None
) -> QuizAttempted:
    """A check the student moved on from without answering: for memory, evidence against
    mastery of its topic (the streak of right answers starts again), not of a struggle."""
    check = pending.check
    return QuizAttempted(
        tenant_id=tenant_id,
        attempt_id=uuid.uuid5(pending.message_id, "lectern.check.skipped"),
        quiz_id=pending.message_id, user_id=user_id, correct=0, total=1,
        session_id=session_id, results=[
            QuizAnswerResult(
                question_id=check.question_id, kind=check.kind, correct=False,
                outcome="skipped", topic=check.topic, document_id=check.document_id,
                chunk_ids=[check.chunk_id], section=section_tested(check),
                document_title=check.title,
            )
        ],
    )  # fmt: skip


async def settle_skipped(
    conn: Connection,
    *,
    tenant_id: str,
    user_id: str,
    pending: PendingCheck,
    session_id: uuid.UUID | None = None,
) -> None:
    """Mark a pending check skipped, with its ``quiz.attempted`` in the same transaction."""
    if await repo.settle_check(
        pool=conn, tenant_id=tenant_id, message_id=pending.message_id,
        outcome={"status": "skipped"},
    ):  # fmt: skip
        await enqueue(conn, skipped_attempt(tenant_id, user_id, pending, session_id))
