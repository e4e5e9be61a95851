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
from faststream.nats import NatsBroker
from pydantic import BaseModel, Field

from lectern_common.events import ChunkRow
from lectern_gateway.auth import PrincipalDep, StaffDep
from lectern_gateway.config import Settings
from lectern_gateway.deps import BrokerDep, GatewayDep, PoolDep, SettingsDep
from lectern_gateway.documents import lifecycle
from lectern_gateway.documents.views import DocumentView
from lectern_gateway.feedback.views import FlagView
from lectern_gateway.index import chunks_by_id
from lectern_gateway.problems import ProblemError
from lectern_gateway.quality.service import teacher_classes
from lectern_gateway.review import gap_retry
from lectern_gateway.review import repository as repo

router = APIRouter(tags=["review"])


class Summary(BaseModel):
    """Open items in each queue."""

    flags: int
    gap_topics: int
    gap_questions: int
    duplicates: int
    stale: int
    conflicts: int


@router.get("/v1/review", summary="How many items wait in each review queue (staff)")
async def review_summary(
    staff: StaffDep, pool: PoolDep, broker: BrokerDep, settings: SettingsDep
) -> Summary:
    """Admins count the tenant's; teachers their classes' and class-less material's."""
    flags = await flagged_answers(staff, pool, status="open", limit=1000)
    gaps = await gap_queue(staff, pool, limit=500)
    conflicts = await conflict_queue(
        staff, pool, broker, settings, status="open", document_id=None, limit=1000
    )
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
    rows = await repo.flags(
        pool=pool, tenant_id=staff.tenant_id, status=status, limit=limit,
        classes=await teacher_classes(pool, staff),
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
        if not await repo.flag_visible(
            pool=conn, tenant_id=staff.tenant_id, flag_id=flag_id, classes=classes
        ):
            raise ProblemError(404, "Not found", f"no flag {flag_id}")
        if body.document_id is not None and not await repo.document_exists(
            pool=conn, tenant_id=staff.tenant_id, document_id=body.document_id
        ):
            raise ProblemError(422, "Unprocessable", f"no document {body.document_id}")
        if not await repo.resolve_flag(
            pool=conn, tenant_id=staff.tenant_id, flag_id=flag_id, action=body.action,
            document_id=body.document_id, note=body.note, resolved_by=staff.user_id,
        ):  # fmt: skip
            raise ProblemError(404, "Not found", f"no flag {flag_id}")
        if body.document_id is not None and body.action != "dismissed":
            await lifecycle.record_change(
                conn, staff, body.document_id, f"flag_{body.action}",
                {"flag_id": [None, str(flag_id)], "note": [None, body.note]},
            )  # fmt: skip
        row = await repo.flag(pool=conn, tenant_id=staff.tenant_id, flag_id=flag_id)
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
    rows = await repo.gap_topics(
        pool=pool,
        tenant_id=staff.tenant_id,
        limit=limit,
        classes=await teacher_classes(pool, staff),
    )
    return [GapTopicQueue.model_validate(dict(r)) for r in rows]


class GapRetry(BaseModel):
    """Which open gaps to re-try: a topic's, these, or (neither) all of them."""

    topic: str | None = Field(default=None, max_length=200)
    gap_ids: list[uuid.UUID] | None = Field(default=None, max_length=repo.MAX_RETRIES)


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
    found = await repo.open_gaps(
        pool=deps.pool, tenant_id=staff.tenant_id, topic=body.topic, gap_ids=body.gap_ids,
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
    if not await repo.document_exists(
        pool=pool, tenant_id=staff.tenant_id, document_id=body.document_id
    ):
        raise ProblemError(422, "Unprocessable", f"no document {body.document_id}")
    row = await repo.insert_gap_closure(
        pool=pool, tenant_id=staff.tenant_id, topic=body.topic, document_id=body.document_id,
        requested_by=staff.user_id,
    )  # fmt: skip
    return GapClosure.model_validate(dict(row))


@router.get("/v1/review/gaps/closures", summary="Gap topics closed by documents (staff)")
async def gap_closures(staff: StaffDep, pool: PoolDep) -> list[GapClosure]:
    rows = await repo.gap_closures(pool=pool, tenant_id=staff.tenant_id)
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
    rows = await repo.notices(
        pool=pool, tenant_id=principal.tenant_id, user_id=principal.user_id, unread=unread
    )
    return [Notice.model_validate(dict(r)) for r in rows]


@router.post("/v1/notices/{notice_id}/read", summary="Mark a notice read", tags=["notices"])
async def read_notice(notice_id: uuid.UUID, principal: PrincipalDep, pool: PoolDep) -> Notice:
    row = await repo.mark_notice_read(
        pool=pool, tenant_id=principal.tenant_id, user_id=principal.user_id, notice_id=notice_id
    )
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


@router.get("/v1/review/duplicates", summary="Near-duplicate documents to decide on (staff)")
async def duplicate_queue(
    staff: StaffDep, pool: PoolDep, limit: int = Query(default=100, ge=1, le=1000)
) -> list[DuplicatePair]:
    rows = await repo.duplicates(
        pool=pool,
        tenant_id=staff.tenant_id,
        classes=await teacher_classes(pool, staff),
        limit=limit,
    )
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
    row = await repo.near_duplicate_of(
        pool=pool, tenant_id=staff.tenant_id, document_id=document_id,
        classes=await teacher_classes(pool, staff),
    )  # fmt: skip
    if row is None or row["near_duplicate_of"] is None:
        raise ProblemError(404, "Not found", f"document {document_id} is no near-duplicate")
    other = row["near_duplicate_of"]
    if body.decision == "merge":
        await lifecycle.supersede(pool, staff, document_id, by=other, action="merged")
    async with pool.acquire() as conn, conn.transaction():
        await repo.set_duplicate_review(
            pool=conn, document_id=document_id,
            review={"keep": "kept", "merge": "merged", "distinct": "distinct"}[body.decision],
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
    rows = await repo.stale_documents(
        pool=pool, tenant_id=staff.tenant_id, default_days=settings.freshness_horizon_days,
        classes=classes, limit=limit,
    )  # fmt: skip
    return [
        StaleDocument(
            document=DocumentBrief.model_validate({k: r[k] for k in repo.BRIEF_COLUMNS}),
            dated=r["dated"], horizon_days=r["horizon_days"], overdue_days=r["overdue_days"],
        )
        for r in rows
    ]  # fmt: skip


@router.get("/v1/review/horizons", summary="The tenant's freshness horizons by subject (staff)")
async def horizons(staff: StaffDep, pool: PoolDep) -> dict[str, int]:
    return await repo.horizons(pool=pool, tenant_id=staff.tenant_id)


@router.put("/v1/review/horizons/{subject}", summary="Set a subject's freshness horizon (staff)")
async def set_horizon(subject: str, body: Horizon, staff: StaffDep, pool: PoolDep) -> Horizon:
    await repo.set_horizon(
        pool=pool, tenant_id=staff.tenant_id, subject=subject[:200], days=body.days
    )
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


async def _with_passages(
    broker: NatsBroker, settings: Settings, tenant_id: str, rows: list[Any]
) -> list[SourceConflict]:
    """The conflicts with both sides' passages from the index's owner (a conflict one of
    whose chunks is gone is left out)."""
    chunks = await chunks_by_id(
        broker, settings, tenant_id, [r[f"chunk_{s}"] for r in rows for s in "ab"]
    )
    return [
        _conflict(r, chunks[r["chunk_a"]], chunks[r["chunk_b"]])
        for r in rows
        if r["chunk_a"] in chunks and r["chunk_b"] in chunks
    ]


def _conflict(row: Any, chunk_a: ChunkRow, chunk_b: ChunkRow) -> SourceConflict:
    def side(s: str, chunk: ChunkRow) -> ConflictSide:
        return ConflictSide(
            document_id=row[f"document_{s}"], title=row[f"title_{s}"], chunk_id=row[f"chunk_{s}"],
            page_start=chunk.page_start, section=list(chunk.section_path),
            statement=row[f"statement_{s}"], passage=chunk.text,
        )  # fmt: skip

    return SourceConflict(
        id=row["id"], kind=row["kind"], detail=row["detail"], similarity=row["similarity"],
        status=row["status"], a=side("a", chunk_a), b=side("b", chunk_b),
        created_at=row["created_at"],
        resolution=row["resolution"], note=row["note"], resolved_by=row["resolved_by"],
    )  # fmt: skip


@router.get("/v1/review/conflicts", summary="Sources that contradict each other (staff)")
async def conflict_queue(
    staff: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
    status: Literal["open", "resolved"] | None = "open",
    document_id: uuid.UUID | None = None,
    limit: int = Query(default=100, ge=1, le=1000),
) -> list[SourceConflict]:
    """Found when a document is indexed: each of its chunks is compared with its nearest
    chunks in the tenant's other documents. Only conflicts between searchable documents."""
    rows = await repo.conflicts(
        pool=pool, tenant_id=staff.tenant_id, status=status, document_id=document_id, limit=limit,
        classes=await teacher_classes(pool, staff),
    )  # fmt: skip
    return await _with_passages(broker, settings, staff.tenant_id, list(rows))


@router.post("/v1/review/conflicts/{conflict_id}/resolve", summary="Resolve a conflict (staff)")
async def resolve_conflict(
    conflict_id: uuid.UUID,
    body: ConflictResolution,
    staff: StaffDep,
    pool: PoolDep,
    broker: BrokerDep,
    settings: SettingsDep,
) -> SourceConflict:
    row = await repo.conflict(
        pool=pool, tenant_id=staff.tenant_id, conflict_id=conflict_id,
        classes=await teacher_classes(pool, staff),
    )  # fmt: skip
    if row is None:
        raise ProblemError(404, "Not found", f"no conflict {conflict_id}")
    if body.resolution in ("archive_a", "archive_b"):
        loser = row["document_a"] if body.resolution == "archive_a" else row["document_b"]
        await lifecycle.set_status(pool, staff, loser, to="archived", allowed_from=("indexed",))
    await repo.resolve_conflict(
        pool=pool, conflict_id=conflict_id, resolution=body.resolution, note=body.note,
        resolved_by=staff.user_id,
    )  # fmt: skip
    fresh = await repo.conflict(pool=pool, tenant_id=staff.tenant_id, conflict_id=conflict_id)
    resolved = await _with_passages(broker, settings, staff.tenant_id, [fresh])
    if not resolved:
        raise ProblemError(404, "Not found", f"conflict {conflict_id}: a side's passage is gone")
    return resolved[0]
