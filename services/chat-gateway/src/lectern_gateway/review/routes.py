"""The review queues of a tenant's library: admins see the tenant's, teachers their classes'
(token claim and the classes they upload for) and class-less material's and sessions'.

- flagged answers: the question, the answer, its sources and the student's reason; resolved
  by fixing the material, marking a source wrong, or dismissing;
- knowledge gaps by topic: closed by uploading material and re-trying the questions;
- near-duplicate documents: keep both, merge (the newer one is superseded by the one it
  repeats) or mark distinct;
- documents past their subject's freshness horizon;
- conflicting sources: two documents that state different numbers for the same thing, or
  negate each other, side by side.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_gateway.auth import PrincipalDep, StaffDep
from lectern_gateway.deps import GatewayDep, PoolDep, SettingsDep
from lectern_gateway.documents import lifecycle
from lectern_gateway.documents.views import DocumentView
from lectern_gateway.feedback.views import FlagView
from lectern_gateway.problems import ProblemError
from lectern_gateway.quality.service import teacher_classes
from lectern_gateway.review import gaps as gap_retry

router = APIRouter(tags=["review"])


class Summary(BaseModel):
    """Open items in each queue."""

    flags: int
    gap_topics: int
    gap_questions: int
    duplicates: int
    stale: int
    conflicts: int


def _scope(column: str, n: int) -> str:
    """Class-less material, or the teacher's classes (``$n`` NULL: an admin sees all)."""
    return f"(${n}::text[] IS NULL OR {column} IS NULL OR {column} = ANY(${n}::text[]))"


@router.get("/v1/review", summary="How many items wait in each review queue (staff)")
async def review_summary(staff: StaffDep, pool: PoolDep, settings: SettingsDep) -> Summary:
    """Admins count the tenant's; teachers their classes' and class-less material's."""
    flags = await flagged_answers(staff, pool, status="open", limit=1000)
    gaps = await gap_queue(staff, pool, limit=500)
    conflicts = await conflict_queue(staff, pool, status="open", document_id=None, limit=1000)
    duplicates = await duplicate_queue(staff, pool, limit=1000)
    stale = await stale_queue(staff, pool, settings, limit=1000)
    return Summary(
        flags=len(flags), gap_topics=len(gaps), gap_questions=sum(g.count for g in gaps),
        duplicates=len(duplicates), stale=len(stale), conflicts=len(conflicts),
    )  # fmt: skip


# ---------------------------------------------------------------- flagged answers


class FlagSource(BaseModel):
    """A source the flagged answer cited."""

    label: str
    document_id: uuid.UUID | None
    chunk_id: uuid.UUID | None
    title: str | None
    text: str | None


class FlaggedAnswer(FlagView):
    """A flagged answer with what a teacher needs to judge it."""

    question: str | None
    answer: str
    sources: list[FlagSource]
    created_at: dt.datetime
    action: str | None = None
    document_id: uuid.UUID | None = None
    resolution: str | None = None
    resolved_by: str | None = None
    resolved_at: dt.datetime | None = None


class FlagResolution(BaseModel):
    """How a teacher resolved a flag."""

    action: Literal["fixed_material", "wrong_source", "dismissed"]
    document_id: uuid.UUID | None = Field(
        default=None, description="the document fixed, or the source that was wrong"
    )
    note: str | None = Field(default=None, max_length=4000)


_FLAG_SELECT = """
    SELECT f.*, m.content AS answer, m.citations,
           (SELECT q.content FROM chat_messages q WHERE q.session_id = m.session_id
              AND q.role = 'user' AND q.created_at <= m.created_at
            ORDER BY q.created_at DESC LIMIT 1) AS question
    FROM feedback_flags f JOIN chat_messages m ON m.id = f.message_id
    LEFT JOIN chat_sessions s ON s.id = f.session_id
    WHERE f.tenant_id = $1"""


def _flag(row: Any) -> FlaggedAnswer:
    citations = row["citations"] if isinstance(row["citations"], list) else []
    sources = [
        FlagSource(
            label=str(c.get("label")), document_id=c.get("document_id"),
            chunk_id=c.get("chunk_id"), title=c.get("title"), text=c.get("text"),
        )
        for c in citations
        if isinstance(c, dict) and c.get("kind", "textbook") == "textbook"
    ]  # fmt: skip
    values = {k: row[k] for k in row.keys() if k in FlaggedAnswer.model_fields}  # noqa: SIM118
    return FlaggedAnswer.model_validate({**values, "sources": sources})


@router.get("/v1/review/flags", summary="Flagged answers with their question and sources (staff)")
async def flagged_answers(
    staff: StaffDep,
    pool: PoolDep,
    status: Literal["open", "resolved"] | None = "open",
    limit: int = Query(default=100, ge=1, le=1000),
) -> list[FlaggedAnswer]:
    rows = await pool.fetch(
        _FLAG_SELECT + " AND ($2::text IS NULL OR f.status = $2) AND " + _scope("s.class_id", 4)
        + " ORDER BY f.created_at DESC LIMIT $3",
        staff.tenant_id, status, limit, await teacher_classes(pool, staff),
    )  # fmt: skip
    return [_flag(r) for r in rows]


@router.post("/v1/review/flags/{flag_id}/resolve", summary="Resolve a flagged answer (staff)")
async def resolve_flagged_answer(
    flag_id: uuid.UUID, body: FlagResolution, staff: StaffDep, pool: PoolDep
) -> FlaggedAnswer:
    """``fixed_material``: the material was corrected (name the document); ``wrong_source``:
    the answer leaned on a source that does not support it (name it: the document's audit
    log records it); ``dismissed``: the answer was right."""
    classes = await teacher_classes(pool, staff)
    async with pool.acquire() as conn, conn.transaction():
        visible = await conn.fetchval(
            _FLAG_SELECT + " AND f.id = $2 AND " + _scope("s.class_id", 3),
            staff.tenant_id, flag_id, classes,
        )  # fmt: skip
        if visible is None:
            raise ProblemError(404, "Not found", f"no flag {flag_id}")
        if body.document_id is not None:
            owned = await conn.fetchval(
                "SELECT 1 FROM documents WHERE id = $1 AND tenant_id = $2",
                body.document_id, staff.tenant_id,
            )  # fmt: skip
            if owned is None:
                raise ProblemError(422, "Unprocessable", f"no document {body.document_id}")
        updated = await conn.fetchval(
            "UPDATE feedback_flags SET status = 'resolved', action = $3, document_id = $4, "
            "resolution = $5, resolved_by = $6, resolved_at = now() "
            "WHERE id = $1 AND tenant_id = $2 RETURNING id",
            flag_id, staff.tenant_id, body.action, body.document_id, body.note, staff.user_id,
        )  # fmt: skip
        if updated is None:
            raise ProblemError(404, "Not found", f"no flag {flag_id}")
        if body.document_id is not None and body.action != "dismissed":
            await lifecycle.record_change(
                conn, staff, body.document_id, f"flag_{body.action}",
                {"flag_id": [None, str(flag_id)], "note": [None, body.note]},
            )  # fmt: skip
        row = await conn.fetchrow(_FLAG_SELECT + " AND f.id = $2", staff.tenant_id, flag_id)
    return _flag(row)


# ---------------------------------------------------------------- knowledge gaps


class GapQuestion(BaseModel):
    """One open question without material."""

    id: uuid.UUID
    user_id: str
    question: str
    confidence: float
    created_at: dt.datetime
    retried_at: dt.datetime | None


class GapTopicQueue(BaseModel):
    """A topic's open gaps."""

    topic: str
    count: int
    students: int
    last_seen: dt.datetime
    questions: list[GapQuestion]


@router.get("/v1/review/gaps", summary="Open knowledge gaps by topic, most asked first (staff)")
async def gap_queue(
    staff: StaffDep, pool: PoolDep, limit: int = Query(default=50, ge=1, le=500)
) -> list[GapTopicQueue]:
    rows = await pool.fetch(
        "SELECT coalesce(g.topic, 'unknown') AS topic, count(*) AS count, "
        "count(DISTINCT g.user_id) AS students, max(g.created_at) AS last_seen, "
        "(array_agg(jsonb_build_object('id', g.id, 'user_id', g.user_id, 'question', "
        "g.question, 'confidence', g.confidence, 'created_at', g.created_at, 'retried_at', "
        "g.retried_at) ORDER BY g.created_at DESC))[1:20] AS questions "
        "FROM knowledge_gaps g LEFT JOIN chat_sessions s ON s.id = g.session_id "
        "WHERE g.tenant_id = $1 AND g.status = 'open' AND " + _scope("s.class_id", 3)
        + " GROUP BY 1 ORDER BY count(*) DESC, max(g.created_at) DESC LIMIT $2",
        staff.tenant_id, limit, await teacher_classes(pool, staff),
    )  # fmt: skip
    return [GapTopicQueue.model_validate(dict(r)) for r in rows]


class GapRetry(BaseModel):
    """Which open gaps to re-try: a topic's, these, or (neither) all of them."""

    topic: str | None = Field(default=None, max_length=200)
    gap_ids: list[uuid.UUID] | None = Field(default=None, max_length=gap_retry.MAX_RETRIES)


class RetriedQuestion(BaseModel):
    """What a re-try found."""

    gap_id: uuid.UUID
    question: str
    user_id: str
    outcome: Literal["answered", "still_gap", "failed"]
    band: str | None = None
    session_id: uuid.UUID | None = Field(default=None, description="the student's new session")
    document_id: uuid.UUID | None = Field(default=None, description="the material that answers")
    message: str | None = None


@router.post(
    "/v1/review/gaps/retry",
    summary="Re-try open gap questions against the material now (staff)",
)
async def retry_gaps(body: GapRetry, staff: StaffDep, gateway: GatewayDep) -> list[RetriedQuestion]:
    """Each question is retrieved as its student's chat would; an answerable one is asked
    again in a new session of the student's (the real chat turn), the student gets a notice,
    and the gap is answered. Up to 50 questions per call."""
    deps = gateway.chat()
    found = await gap_retry.open_gaps(
        deps.pool, tenant_id=staff.tenant_id, topic=body.topic, gap_ids=body.gap_ids,
        classes=await teacher_classes(deps.pool, staff),
    )  # fmt: skip
    results = [await gap_retry.retry_gap(deps, gap) for gap in found]
    return [RetriedQuestion.model_validate(r.__dict__) for r in results]


class GapClosureIn(BaseModel):
    """The document that answers a gap topic's questions."""

    topic: str = Field(min_length=1, max_length=200)
    document_id: uuid.UUID


class GapClosure(BaseModel):
    """A gap topic closed by a document: re-tried once the document is indexed."""

    id: uuid.UUID
    topic: str
    document_id: uuid.UUID
    status: Literal["waiting", "running", "done", "failed"]
    answered: int
    still_open: int
    error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None


_CLOSURE_COLUMNS = (
    "id, topic, document_id, status, answered, still_open, error, created_at, finished_at"
)


@router.post(
    "/v1/review/gaps/close",
    status_code=202,
    summary="Close a gap topic with a document: its questions are re-tried once it is indexed",
)
async def close_gap(body: GapClosureIn, staff: StaffDep, pool: PoolDep) -> GapClosure:
    """The gateway re-tries the topic's open questions as soon as the document (typically
    just uploaded) is indexed, as ``POST /v1/review/gaps/retry`` does: answerable questions
    are answered in new sessions and their students told. ``GET /v1/review/gaps/closures``
    shows the outcome."""
    exists = await pool.fetchval(
        "SELECT 1 FROM documents WHERE id = $1 AND tenant_id = $2",
        body.document_id, staff.tenant_id,
    )  # fmt: skip
    if exists is None:
        raise ProblemError(422, "Unprocessable", f"no document {body.document_id}")
    row = await pool.fetchrow(
        f"INSERT INTO gap_closures (id, tenant_id, topic, document_id, requested_by) "  # noqa: S608 - constants
        f"VALUES ($1, $2, $3, $4, $5) RETURNING {_CLOSURE_COLUMNS}",
        uuid.uuid4(), staff.tenant_id, body.topic, body.document_id, staff.user_id,
    )  # fmt: skip
    return GapClosure.model_validate(dict(row))


@router.get("/v1/review/gaps/closures", summary="Gap topics closed by documents (staff)")
async def gap_closures(staff: StaffDep, pool: PoolDep) -> list[GapClosure]:
    rows = await pool.fetch(
        f"SELECT {_CLOSURE_COLUMNS} FROM gap_closures WHERE tenant_id = $1 "  # noqa: S608 - constants
        "ORDER BY created_at DESC LIMIT 100",
        staff.tenant_id,
    )
    return [GapClosure.model_validate(dict(r)) for r in rows]


# ---------------------------------------------------------------- student notices


class Notice(BaseModel):
    """Something a student is told (a question of theirs now has an answer)."""

    id: uuid.UUID
    kind: str
    text: str
    session_id: uuid.UUID | None
    created_at: dt.datetime
    read_at: dt.datetime | None


@router.get("/v1/notices", summary="The caller's notices, newest first", tags=["notices"])
async def notices(principal: PrincipalDep, pool: PoolDep, unread: bool = False) -> list[Notice]:
    rows = await pool.fetch(
        "SELECT id, kind, text, session_id, created_at, read_at FROM student_notices "
        "WHERE tenant_id = $1 AND user_id = $2 AND (NOT $3 OR read_at IS NULL) "
        "ORDER BY created_at DESC LIMIT 100",
        principal.tenant_id, principal.user_id, unread,
    )  # fmt: skip
    return [Notice.model_validate(dict(r)) for r in rows]


@router.post("/v1/notices/{notice_id}/read", summary="Mark a notice read", tags=["notices"])
async def read_notice(notice_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep) -> Notice:
    row = await pool.fetchrow(
        "UPDATE student_notices SET read_at = coalesce(read_at, now()) "
        "WHERE id = $1 AND tenant_id = $2 AND user_id = $3 "
        "RETURNING id, kind, text, session_id, created_at, read_at",
        notice_id, principal.tenant_id, principal.user_id,
    )  # fmt: skip
    if row is None:
        raise ProblemError(404, "Not found", f"no notice {notice_id}")
    return Notice.model_validate(dict(row))


# ---------------------------------------------------------------- near-duplicates


class DocumentBrief(BaseModel):
    """A document as a queue shows it."""

    id: uuid.UUID
    title: str
    filename: str
    status: str
    subject: str | None
    created_at: dt.datetime


class DuplicatePair(BaseModel):
    """A document and the earlier one it nearly repeats."""

    document: DocumentBrief
    duplicate_of: DocumentBrief
    score: float | None


class DuplicateDecision(BaseModel):
    """``keep``: both stay; ``merge``: this document is superseded by the one it repeats;
    ``distinct``: they are different documents (the link is removed)."""

    decision: Literal["keep", "merge", "distinct"]


_BRIEF = "id, title, filename, status, subject, created_at"


def _brief(alias: str) -> str:
    """The brief's columns of a documents alias, as one JSON object."""
    columns = ", ".join(f"{alias}.{c}" for c in _BRIEF.split(", "))
    return f"row_to_json((SELECT b FROM (SELECT {columns}) b))"  # noqa: S608 - constants


_DUPLICATES = (
    f"SELECT d.id, d.near_duplicate_score AS score, {_brief('d')} AS doc, "  # noqa: S608 - constants
    f"{_brief('o')} AS other FROM documents d JOIN documents o ON o.id = d.near_duplicate_of "
    "WHERE d.tenant_id = $1 AND d.duplicate_review IS NULL AND d.status = 'indexed' "
    f"AND o.status = 'indexed' AND {_scope('d.class_id', 3)} ORDER BY d.created_at DESC "
    "LIMIT $2"
)


async def _duplicates(
    pool: Any, tenant_id: str, classes: list[str] | None, *, limit: int
) -> list[Any]:
    rows = await pool.fetch(_DUPLICATES, tenant_id, limit, classes)
    return list(rows)


@router.get("/v1/review/duplicates", summary="Near-duplicate documents to decide on (staff)")
async def duplicate_queue(
    staff: StaffDep, pool: PoolDep, limit: int = Query(default=100, ge=1, le=1000)
) -> list[DuplicatePair]:
    rows = await _duplicates(pool, staff.tenant_id, await teacher_classes(pool, staff), limit=limit)
    return [
        DuplicatePair(
            document=DocumentBrief.model_validate_json(r["doc"]),
            duplicate_of=DocumentBrief.model_validate_json(r["other"]),
            score=r["score"],
        )
        for r in rows
    ]


@router.post("/v1/review/duplicates/{document_id}", summary="Keep, merge or mark distinct (staff)")
async def decide_duplicate(
    document_id: uuid.UUID, body: DuplicateDecision, staff: StaffDep, pool: PoolDep
) -> DocumentView:
    row = await pool.fetchrow(
        "SELECT near_duplicate_of FROM documents d WHERE id = $1 AND tenant_id = $2 AND "  # noqa: S608 - constants
        + _scope("d.class_id", 3),
        document_id, staff.tenant_id, await teacher_classes(pool, staff),
    )  # fmt: skip
    if row is None or row["near_duplicate_of"] is None:
        raise ProblemError(404, "Not found", f"document {document_id} is no near-duplicate")
    other = row["near_duplicate_of"]
    if body.decision == "merge":
        await lifecycle.supersede(pool, staff, document_id, by=other, action="merged")
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE documents SET duplicate_review = $2, near_duplicate_of = CASE WHEN $2 = "
            "'distinct' THEN NULL ELSE near_duplicate_of END, updated_at = now() WHERE id = $1",
            document_id, {"keep": "kept", "merge": "merged", "distinct": "distinct"}[body.decision],
        )  # fmt: skip
        if body.decision != "merge":
            await lifecycle.record_change(
                conn, staff, document_id, f"duplicate_{body.decision}",
                {"near_duplicate_of": [str(other), None if body.decision == "distinct"
                                       else str(other)]},
            )  # fmt: skip
    return await lifecycle.document_by_id(pool, staff, document_id)


# ---------------------------------------------------------------- freshness


class StaleDocument(BaseModel):
    """A document past its subject's freshness horizon."""

    document: DocumentBrief
    dated: dt.date = Field(description="its freshness date, else the day it was uploaded")
    horizon_days: int
    overdue_days: int


class Horizon(BaseModel):
    """Days after which a subject's material needs a look."""

    days: int = Field(ge=1, le=36500)


_STALE = (
    f"SELECT {', '.join('d.' + c for c in _BRIEF.split(', '))}, "  # noqa: S608 - constants
    "coalesce(d.freshness_date, d.created_at::date) AS dated, "
    "coalesce(h.days, $2) AS horizon_days, "
    "current_date - (coalesce(d.freshness_date, d.created_at::date) "
    "+ coalesce(h.days, $2)) AS overdue_days "
    "FROM documents d LEFT JOIN freshness_horizons h ON h.tenant_id = d.tenant_id "
    "AND lower(h.subject) = lower(d.subject) "
    f"WHERE d.tenant_id = $1 AND d.status = 'indexed' AND {_scope('d.class_id', 4)} "
    "AND coalesce(d.freshness_date, d.created_at::date) + coalesce(h.days, $2) "
    "< current_date ORDER BY overdue_days DESC LIMIT $3"
)


async def _stale(
    pool: Any, tenant_id: str, default_days: int, classes: list[str] | None, *, limit: int
) -> list[Any]:
    rows = await pool.fetch(_STALE, tenant_id, default_days, limit, classes)
    return list(rows)


@router.get("/v1/review/stale", summary="Documents past their subject's freshness horizon (staff)")
async def stale_queue(
    staff: StaffDep,
    pool: PoolDep,
    settings: SettingsDep,
    limit: int = Query(default=100, ge=1, le=1000),
) -> list[StaleDocument]:
    """A document is dated by its freshness date (else its upload); a subject's horizon is
    the tenant's (``PUT /v1/review/horizons/{subject}``), else the gateway's default."""
    classes = await teacher_classes(pool, staff)
    rows = await _stale(
        pool, staff.tenant_id, settings.freshness_horizon_days, classes, limit=limit
    )
    return [
        StaleDocument(
            document=DocumentBrief.model_validate({k: r[k] for k in _BRIEF.split(", ")}),
            dated=r["dated"], horizon_days=r["horizon_days"], overdue_days=r["overdue_days"],
        )
        for r in rows
    ]  # fmt: skip


@router.get("/v1/review/horizons", summary="The tenant's freshness horizons by subject (staff)")
async def horizons(staff: StaffDep, pool: PoolDep) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT subject, days FROM freshness_horizons WHERE tenant_id = $1 ORDER BY subject",
        staff.tenant_id,
    )
    return {r["subject"]: r["days"] for r in rows}


@router.put("/v1/review/horizons/{subject}", summary="Set a subject's freshness horizon (staff)")
async def set_horizon(subject: str, body: Horizon, staff: StaffDep, pool: PoolDep) -> Horizon:
    await pool.execute(
        "INSERT INTO freshness_horizons (tenant_id, subject, days) VALUES ($1, $2, $3) "
        "ON CONFLICT (tenant_id, subject) DO UPDATE SET days = excluded.days",
        staff.tenant_id, subject[:200], body.days,
    )  # fmt: skip
    return body


# ---------------------------------------------------------------- conflicting sources


class ConflictSide(BaseModel):
    """One side of a conflict."""

    document_id: uuid.UUID
    title: str
    chunk_id: uuid.UUID
    page_start: int | None
    section: list[str]
    statement: str
    passage: str


class SourceConflict(BaseModel):
    """Two sources that disagree, side by side."""

    id: uuid.UUID
    kind: Literal["number", "negation"]
    detail: str
    similarity: float
    status: Literal["open", "resolved"]
    a: ConflictSide
    b: ConflictSide
    created_at: dt.datetime
    resolution: str | None = None
    note: str | None = None
    resolved_by: str | None = None


class ConflictResolution(BaseModel):
    """``archive_a`` / ``archive_b``: take that side's document out of retrieval (restorable);
    ``fixed``: the material was corrected; ``not_a_conflict``: both are right."""

    resolution: Literal["archive_a", "archive_b", "fixed", "not_a_conflict"]
    note: str | None = Field(default=None, max_length=4000)


_CONFLICT_SELECT = """
    SELECT x.*, da.title AS title_a, db.title AS title_b, ca.text AS passage_a,
           cb.text AS passage_b, ca.page_start AS page_a, cb.page_start AS page_b,
           ca.section_path AS section_a, cb.section_path AS section_b
    FROM source_conflicts x
    JOIN documents da ON da.id = x.document_a JOIN documents db ON db.id = x.document_b
    JOIN chunks ca ON ca.id = x.chunk_a JOIN chunks cb ON cb.id = x.chunk_b
    WHERE x.tenant_id = $1"""


def _conflict(row: Any) -> SourceConflict:
    def side(s: str) -> ConflictSide:
        return ConflictSide(
            document_id=row[f"document_{s}"], title=row[f"title_{s}"], chunk_id=row[f"chunk_{s}"],
            page_start=row[f"page_{s}"], section=list(row[f"section_{s}"] or []),
            statement=row[f"statement_{s}"], passage=row[f"passage_{s}"],
        )  # fmt: skip

    return SourceConflict(
        id=row["id"], kind=row["kind"], detail=row["detail"], similarity=row["similarity"],
        status=row["status"], a=side("a"), b=side("b"), created_at=row["created_at"],
        resolution=row["resolution"], note=row["note"], resolved_by=row["resolved_by"],
    )  # fmt: skip


@router.get("/v1/review/conflicts", summary="Sources that contradict each other (staff)")
async def conflict_queue(
    staff: StaffDep,
    pool: PoolDep,
    status: Literal["open", "resolved"] | None = "open",
    document_id: uuid.UUID | None = None,
    limit: int = Query(default=100, ge=1, le=1000),
) -> list[SourceConflict]:
    """Found when a document is indexed: each of its chunks is compared with its nearest
    chunks in the tenant's other documents. Only conflicts between searchable documents."""
    rows = await pool.fetch(
        _CONFLICT_SELECT + " AND ($2::text IS NULL OR x.status = $2) "
        "AND ($3::uuid IS NULL OR $3 IN (x.document_a, x.document_b)) "
        "AND da.status = 'indexed' AND db.status = 'indexed' "
        f"AND ({_scope('da.class_id', 5)} OR {_scope('db.class_id', 5)}) "
        "ORDER BY x.created_at DESC LIMIT $4",
        staff.tenant_id, status, document_id, limit, await teacher_classes(pool, staff),
    )  # fmt: skip
    return [_conflict(r) for r in rows]


@router.post("/v1/review/conflicts/{conflict_id}/resolve", summary="Resolve a conflict (staff)")
async def resolve_conflict(
    conflict_id: uuid.UUID, body: ConflictResolution, staff: StaffDep, pool: PoolDep
) -> SourceConflict:
    row = await pool.fetchrow(
        _CONFLICT_SELECT + f" AND x.id = $2 AND ({_scope('da.class_id', 3)} OR "
        f"{_scope('db.class_id', 3)})",
        staff.tenant_id, conflict_id, await teacher_classes(pool, staff),
    )  # fmt: skip
    if row is None:
        raise ProblemError(404, "Not found", f"no conflict {conflict_id}")
    if body.resolution in ("archive_a", "archive_b"):
        loser = row["document_a"] if body.resolution == "archive_a" else row["document_b"]
        await lifecycle.set_status(pool, staff, loser, to="archived", allowed_from=("indexed",))
    await pool.execute(
        "UPDATE source_conflicts SET status = 'resolved', resolution = $2, note = $3, "
        "resolved_by = $4, resolved_at = now() WHERE id = $1",
        conflict_id, body.resolution, body.note, staff.user_id,
    )  # fmt: skip
    fresh = await pool.fetchrow(_CONFLICT_SELECT + " AND x.id = $2", staff.tenant_id, conflict_id)
    return _conflict(fresh)
