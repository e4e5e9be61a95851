"""Quizzes drawn from the material, answer checking, and the syllabus explorer."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_common.db.types import Pool
from lectern_common.embeddings import Embedder
from lectern_common.events import MaterialFilter, QuizAnswerResult, QuizAttempted
from lectern_common.outbox import enqueue
from lectern_gateway.auth import Principal, PrincipalDep
from lectern_gateway.classes.membership import require_member, student_classes
from lectern_gateway.deps import BrokerDep, GatewayDep, PoolDep, SettingsDep
from lectern_gateway.index import material
from lectern_gateway.lti.service import queue_attempt_score
from lectern_gateway.memories.service import struggle_topics
from lectern_gateway.problems import ProblemError
from lectern_gateway.study import generator
from lectern_gateway.study import repository as repo
from lectern_gateway.study.grading import (
    Similarities,
    choice_is_right,
    embed_similarities,
    short_answer_is_right,
)
from lectern_gateway.study.model_writer import GeminiQuizWriter
from lectern_gateway.study.syllabus import outline

router = APIRouter(tags=["study"])
Collection = Literal["educational", "assessment"]


class QuizRequest(BaseModel):
    """What to quiz on: filters over the tenant's material, and the quiz's shape."""

    title: str | None = Field(default=None, max_length=200)
    subject: str | None = Field(default=None, max_length=100)
    module: str | None = Field(default=None, max_length=200)
    class_id: str | None = Field(default=None, max_length=200)
    collection: Collection = "educational"
    document_ids: list[uuid.UUID] = Field(default_factory=list, max_length=100)
    section: list[str] = Field(
        default_factory=list, max_length=10,
        description="a section path (as the syllabus lists it): quiz on that section only",
    )  # fmt: skip
    num_questions: int = Field(default=10, ge=1, le=50)
    difficulty: generator.Difficulty = "medium"
    kinds: list[generator.QuestionKind] = Field(
        default_factory=lambda: list(generator.KINDS), min_length=1, max_length=3
    )
    assign_to_class: str | None = Field(
        default=None, max_length=200,
        description="teachers: the class whose students (the token's `classes` claim) may "
        "take this quiz (required to share a quiz drawn from assessment material)",
    )  # fmt: skip


class QuizQuestionView(BaseModel):
    """A question as the student sees it (answer and explanation only for staff)."""

    id: str
    kind: generator.QuestionKind
    prompt: str
    options: list[str]
    chunk_ids: list[uuid.UUID]
    document_id: uuid.UUID
    document_title: str
    pages: list[int]
    section: str | None
    topic: str
    answer: str | None = None
    explanation: str | None = None


class QuizView(BaseModel):
    """A stored quiz."""

    id: uuid.UUID
    title: str
    difficulty: str
    generator: str
    created_by: str
    created_at: datetime
    assigned_class_id: str | None
    questions: list[QuizQuestionView]


class AttemptRequest(BaseModel):
    """The student's answers, by question id (an option's text, ``true``/``false``, or the
    typed answer); unanswered questions count as wrong."""

    answers: dict[str, str | bool] = Field(max_length=50)


class AnswerCheck(BaseModel):
    """One question checked: right or not, the right answer, and the passage it came from."""

    question_id: str
    correct: bool
    given: str | None
    answer: str
    feedback: str
    explanation: str
    chunk_ids: list[uuid.UUID]
    document_id: uuid.UUID
    pages: list[int]
    section: str | None


class AttemptResult(BaseModel):
    """A checked attempt."""

    id: uuid.UUID
    quiz_id: uuid.UUID
    correct: int
    total: int
    results: list[AnswerCheck]


def _stored(question: generator.Question) -> dict[str, Any]:
    return {
        "id": question.id, "kind": question.kind, "prompt": question.prompt,
        "options": question.options, "answer": question.answer,
        "accepted": question.accepted, "explanation": question.explanation,
        "evidence": question.evidence, "chunk_ids": [str(question.chunk.id)],
        "document_id": str(question.chunk.document_id),
        "document_title": question.chunk.document_title, "pages": question.pages,
        "section": question.section, "topic": question.topic,
    }  # fmt: skip


def _view(quiz: dict[str, Any], principal: Principal) -> QuizView:
    hidden = {} if principal.is_staff else {"answer": None, "explanation": None}
    questions = [QuizQuestionView.model_validate({**q, **hidden}) for q in quiz["questions"]]
    return QuizView(
        id=quiz["id"], title=quiz["title"], difficulty=quiz["difficulty"],
        generator=quiz["generator"], created_by=quiz["created_by"],
        created_at=quiz["created_at"], assigned_class_id=quiz["assigned_class_id"],
        questions=questions,
    )  # fmt: skip


def _may_take(quiz: dict[str, Any], principal: Principal) -> bool:
    if principal.is_staff or quiz["created_by"] == principal.user_id:
        return True
    # a student sees another's quiz only when a teacher assigned it to one of their classes
    # (the token's ``classes`` claim)
    return quiz["assigned_class_id"] in principal.classes


async def _quiz_for(pool: Pool, principal: Principal, quiz_id: uuid.UUID) -> dict[str, Any]:
    quiz = await repo.get_quiz(pool, tenant_id=principal.tenant_id, quiz_id=quiz_id)
    if quiz is None or not _may_take(quiz, principal):
        raise ProblemError(404, "Not found", f"no quiz {quiz_id}")
    return quiz


@router.post("/v1/quizzes", status_code=201, summary="Draw a quiz from the material")
async def create_quiz(
    body: QuizRequest, principal: PrincipalDep, pool: PoolDep, gateway: GatewayDep
) -> QuizView:
    """Questions spread over the sections of the selected material, each citing the chunk
    that holds its answer; a student's struggle topics come first. With a model key the
    model writes them (validated against their passages); the offline generator fills in."""
    if body.collection == "assessment" and not principal.is_staff:
        raise ProblemError(403, "Forbidden", "assessment material is for teachers")
    if body.assign_to_class and not principal.is_staff:
        raise ProblemError(403, "Forbidden", "only teachers assign quizzes to a class")
    if body.collection == "assessment" and not body.assign_to_class:
        raise ProblemError(
            422, "Unprocessable", "a quiz from assessment material needs assign_to_class"
        )
    classes = await student_classes(pool, principal)
    require_member(body.class_id, classes)
    selected = MaterialFilter.model_validate(
        {"collections": [body.collection], "subject": body.subject, "module": body.module,
         "class_id": body.class_id, "document_ids": body.document_ids,
         "visible_classes": classes}
    )  # fmt: skip
    rows = await material(
        gateway.broker, gateway.settings, principal.tenant_id, selected, purpose="quiz"
    )
    chunks = [
        generator.SourceChunk.from_row(r)
        for r in rows
    ]  # fmt: skip
    if body.section:
        wanted = tuple(body.section)
        chunks = [c for c in chunks if c.section_path[: len(wanted)] == wanted]
    if not chunks:
        raise ProblemError(404, "No material", "no indexed material matches these filters")
    focus = await struggle_topics(
        gateway.broker, tenant_id=principal.tenant_id, user_id=principal.user_id,
        timeout=gateway.settings.memory_timeout_s,
    )  # fmt: skip
    questions, made_by = await _questions(gateway.quiz_writer, chunks, body, focus)
    if not questions:
        raise ProblemError(
            422, "No questions", "the selected material states no definitions or facts to ask"
        )
    titles = list(dict.fromkeys(c.document_title for c in chunks))
    quiz = {
        "id": uuid.uuid4(), "tenant_id": principal.tenant_id, "created_by": principal.user_id,
        "creator_role": principal.role,
        "title": body.title or f"Quiz: {', '.join(titles[:2])}"[:200],
        "difficulty": body.difficulty, "request": body.model_dump(mode="json"),
        "generator": made_by, "uses_assessment": body.collection == "assessment",
        "assigned_class_id": body.assign_to_class,
        "questions": [_stored(q) for q in questions],
    }  # fmt: skip
    return _view(await repo.insert_quiz(pool, quiz), principal)


async def _questions(
    writer: GeminiQuizWriter | None,
    chunks: list[generator.SourceChunk],
    body: QuizRequest,
    focus: list[str],
) -> tuple[list[generator.Question], str]:
    """The model's validated questions topped up by the offline generator, and who made
    them (``gemini:<model>``, ``offline`` or both joined by ``+``)."""
    written: list[generator.Question] = []
    if writer is not None:
        written = await writer.write(
            chunks, num_questions=body.num_questions, kinds=body.kinds,
            difficulty=body.difficulty, focus_topics=focus,
        ) or []  # fmt: skip
    missing = body.num_questions - len(written)
    offline: list[generator.Question] = []
    if missing > 0:
        taken = {q.evidence for q in written}
        candidates = generator.generate(
            chunks, num_questions=body.num_questions, kinds=body.kinds,
            difficulty=body.difficulty, focus_topics=focus,
        )  # fmt: skip
        offline = [q for q in candidates if q.evidence not in taken][:missing]
    makers = ([writer.name] if written and writer else []) + (["offline"] if offline else [])
    return written + offline, "+".join(makers) or "offline"


@router.get("/v1/quizzes", summary="Quizzes I made or may take, newest first")
async def list_quizzes(
    principal: PrincipalDep, pool: PoolDep, limit: int = Query(default=50, ge=1, le=200)
) -> list[QuizView]:
    quizzes = await repo.list_quizzes(
        pool, tenant_id=principal.tenant_id,
        user_id=None if principal.is_staff else principal.user_id,
        classes=list(principal.classes), limit=limit,
    )  # fmt: skip
    return [_view(q, principal) for q in quizzes]


@router.get("/v1/quizzes/{quiz_id}", summary="A quiz (answers hidden from students)")
async def get_quiz(quiz_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep) -> QuizView:
    return _view(await _quiz_for(pool, principal, quiz_id), principal)


async def _similarities(
    embedder: Embedder | None, questions: list[dict[str, Any]], given: dict[str, Any]
) -> dict[str, Similarities]:
    """The embedder's cosines for each typed answer against its question's first accepted
    answer (empty without an embedder: the checker then judges by the words)."""
    if embedder is None or not questions:
        return {}
    items = [
        ((q["accepted"] or [q["answer"]])[0], str(given[q["id"]]), q["prompt"]) for q in questions
    ]
    found = await embed_similarities(embedder, items)
    return {q["id"]: s for q, s in zip(questions, found, strict=True)}


async def _model_verdicts(
    writer: GeminiQuizWriter | None, questions: list[dict[str, Any]], given: dict[str, Any]
) -> dict[str, bool]:
    """The model's verdicts on typed answers that differ from the reference (empty without
    a model, or when it fails: the rules decide)."""
    if writer is None:
        return {}
    typed = [
        q for q in questions
        if q["kind"] == "short_answer" and str(given.get(q["id"]) or "").strip()
        and not choice_is_right(q["answer"], str(given[q["id"]]))
    ]  # fmt: skip
    verdicts = await writer.judge(
        [(q["prompt"], q["answer"], q["evidence"], str(given[q["id"]])) for q in typed]
    )
    if verdicts is None:
        return {}
    return {q["id"]: v for q, v in zip(typed, verdicts, strict=True)}


def _feedback(question: dict[str, Any], correct: bool) -> str:
    where = question["topic"] + (f", p.{question['pages'][0]}" if question["pages"] else "")
    if correct:
        return f"Right: {question['evidence']}"
    if question["kind"] == "true_false":
        return f"Not quite: the statement is {question['answer']}. {question['evidence']} " \
               f"See {where}."  # fmt: skip
    return f"Not quite: the answer is {question['answer']}. {question['evidence']} See {where}."


@router.post("/v1/quizzes/{quiz_id}/attempts", status_code=201, summary="Check answers to a quiz")
async def attempt_quiz(
    quiz_id: uuid.UUID,
    body: AttemptRequest,
    principal: PrincipalDep,
    pool: PoolDep,
    broker: BrokerDep,
    gateway: GatewayDep,
) -> AttemptResult:
    """Each answer checked against the question's reference and source; the result is
    stored and published as ``quiz.attempted`` (memory learns what was hard)."""
    quiz = await _quiz_for(pool, principal, quiz_id)
    questions: list[dict[str, Any]] = quiz["questions"]
    unknown = set(body.answers) - {q["id"] for q in questions}
    if unknown:
        raise ProblemError(422, "Unknown questions", f"not in this quiz: {sorted(unknown)}")
    given = {k: str(v).lower() if isinstance(v, bool) else v for k, v in body.answers.items()}
    judged = await _model_verdicts(gateway.quiz_writer, questions, given)
    typed = [
        q for q in questions
        if q["kind"] == "short_answer" and str(given.get(q["id"]) or "").strip()
        and q["id"] not in judged
    ]  # fmt: skip
    similarities = await _similarities(gateway.embedder, typed, given)
    checks: list[AnswerCheck] = []
    for q in questions:
        said = given.get(q["id"])
        if said is None or not str(said).strip():
            correct = False
        elif q["id"] in judged:
            correct = judged[q["id"]]
        elif q["kind"] == "short_answer":
            correct = short_answer_is_right(
                q["accepted"] or [q["answer"]], str(said), question=q["prompt"],
                evidence=q["evidence"], similarities=similarities.get(q["id"]),
            )  # fmt: skip
        else:
            correct = choice_is_right(q["answer"], str(said))
        checks.append(
            AnswerCheck(
                question_id=q["id"], correct=correct,
                given=None if said is None else str(said), answer=q["answer"],
                feedback=_feedback(q, correct), explanation=q["explanation"],
                chunk_ids=q["chunk_ids"], document_id=q["document_id"], pages=q["pages"],
                section=q["section"],
            )
        )  # fmt: skip
    attempt_id = uuid.uuid4()
    right = sum(1 for c in checks if c.correct)
    event = QuizAttempted(
        tenant_id=principal.tenant_id, attempt_id=attempt_id, quiz_id=quiz_id,
        user_id=principal.user_id, correct=right, total=len(checks),
        results=[
            QuizAnswerResult(
                question_id=q["id"], kind=q["kind"], correct=c.correct, topic=q["topic"],
                document_id=q["document_id"], chunk_ids=q["chunk_ids"],
            )
            for q, c in zip(questions, checks, strict=True)
        ],
    )  # fmt: skip
    async with pool.acquire() as conn, conn.transaction():
        await repo.insert_attempt(
            conn,
            {"id": attempt_id, "quiz_id": quiz_id, "tenant_id": principal.tenant_id,
             "user_id": principal.user_id, "answers": given,
             "results": [c.model_dump(mode="json") for c in checks], "correct": right,
             "total": len(checks)},
        )  # fmt: skip
        # the outbox: the event is published once the attempt is committed
        await enqueue(conn, event)
        # and the score goes to the LMS gradebook the quiz was launched from, if any
        await queue_attempt_score(
            conn, tenant_id=principal.tenant_id, user_id=principal.user_id, quiz_id=quiz_id,
            attempt_id=attempt_id, correct=right, total=len(checks),
            at=event.occurred_at.isoformat(),
        )  # fmt: skip
    return AttemptResult(
        id=attempt_id, quiz_id=quiz_id, correct=right, total=len(checks), results=checks
    )


class SectionView(BaseModel):
    """A section of a document, in reading order."""

    path: list[str]
    title: str
    level: int
    page_start: int | None
    page_end: int | None
    chunk_count: int = Field(description="chunks in the section and its subsections")
    first_chunk_id: uuid.UUID = Field(description="open it in the source viewer")
    topics: list[str]
    overview: str


class SyllabusDocument(BaseModel):
    """A document and its sections."""

    id: uuid.UUID
    title: str
    filename: str
    subject: str | None
    page_count: int | None
    collection: str
    sections: list[SectionView]


class SyllabusModule(BaseModel):
    """A module (``module`` tag of its documents; null for untagged material)."""

    module: str | None
    documents: list[SyllabusDocument]


class Syllabus(BaseModel):
    """The tenant's material as modules, documents and sections."""

    modules: list[SyllabusModule]


@router.get("/v1/syllabus", summary="The material as modules, documents and sections")
async def syllabus(
    principal: PrincipalDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    subject: str | None = Query(default=None, max_length=100),
    module: str | None = Query(default=None, max_length=200),
    document_id: uuid.UUID | None = None,
) -> Syllabus:
    """Sections in order with page ranges, chunk counts, topics and an overview (a section's
    first sentences); students see the educational collection only."""
    collections = ["educational", "assessment"] if principal.is_staff else ["educational"]
    selected = MaterialFilter.model_validate(
        {"collections": collections, "subject": subject, "module": module,
         "document_ids": [document_id] if document_id else [],
         "visible_classes": await student_classes(pool, principal)}
    )  # fmt: skip
    rows = await material(broker, settings, principal.tenant_id, selected, purpose="syllabus")
    if document_id is not None and not rows:
        raise ProblemError(404, "Not found", f"no indexed document {document_id}")
    by_document: dict[uuid.UUID, list[Any]] = {}
    for row in rows:
        by_document.setdefault(row["document_id"], []).append(row)
    modules: dict[str | None, list[SyllabusDocument]] = {}
    for doc_rows in by_document.values():
        first = doc_rows[0]
        sections = [
            SectionView(
                path=s.path, title=s.title, level=s.level, page_start=s.page_start,
                page_end=s.page_end, chunk_count=s.chunk_count,
                first_chunk_id=s.first_chunk_id, topics=s.topics, overview=s.overview,
            )
            for s in outline(doc_rows)
        ]  # fmt: skip
        modules.setdefault(first["module_tag"], []).append(
            SyllabusDocument(
                id=first["document_id"], title=first["title"], filename=first["filename"],
                subject=first["subject"], page_count=first["page_count"],
                collection=first["collection"], sections=sections,
            )
        )  # fmt: skip
    return Syllabus(modules=[SyllabusModule(module=m, documents=d) for m, d in modules.items()])
