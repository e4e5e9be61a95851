"""The quality dashboard: how well the deployment answers, per day and per persona or subject.

``GET /v1/metrics/quality`` reads the daily aggregates (``aggregates``), never the messages;
``GET /v1/metrics/quality/questions`` lists the questions behind a figure. Admins see the
tenant; teachers see their classes (the token's claim and the classes they upload material
for) and the sessions that name no class.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from lectern_gateway.auth import StaffDep
from lectern_gateway.deps import PoolDep
from lectern_gateway.problems import ProblemError
from lectern_gateway.quality import repository as repo
from lectern_gateway.quality.aggregates import percentile
from lectern_gateway.quality.service import teacher_classes

router = APIRouter(tags=["quality"])

Band = Literal["high", "medium", "low", "gap"]
BANDS: tuple[Band, ...] = ("high", "medium", "low", "gap")


class Latency(BaseModel):
    """Percentiles in milliseconds (bucket upper bounds; None without data)."""

    p50: float | None = None
    p95: float | None = None


class Figures(BaseModel):
    """The figures of one day and group, or of the whole range."""

    questions: int = 0
    answers: dict[str, int] = Field(default_factory=dict, description="by confidence band")
    gap_rate: float = 0.0
    flagged: int = 0
    with_citations: float = Field(default=0.0, description="share of answers citing a source")
    fallbacks: int = Field(default=0, description="answers a fallback model gave")
    ttft_ms: Latency = Field(default_factory=Latency)
    retrieval_ms: Latency = Field(default_factory=Latency)
    questions_url: str = Field(description="the questions behind these figures")


class DayFigures(Figures):
    """Figures of one day (and group)."""

    day: date
    group: str = Field(description="the persona or subject ('' for none), or 'all'")


class GapTopic(BaseModel):
    """A topic students asked about that the material does not cover."""

    topic: str
    questions: int
    questions_url: str


class CitedDocument(BaseModel):
    """A document and how many answers cited it."""

    document_id: uuid.UUID
    title: str
    citations: int = 0


class Quality(BaseModel):
    """The dashboard's data."""

    start: date
    end: date
    group_by: Literal["persona", "subject", "none"]
    scope: Literal["tenant", "classes"]
    classes: list[str] = Field(default_factory=list)
    series: list[DayFigures]
    totals: Figures
    top_gap_topics: list[GapTopic]
    most_cited: list[CitedDocument]
    never_cited: list[CitedDocument]
    ingest_backlog: dict[str, int]


class QuestionRow(BaseModel):
    """A question behind a figure, with its answer."""

    session_id: uuid.UUID
    question: str
    answer_message_id: uuid.UUID | None
    band: str | None
    flagged: bool
    persona: str | None
    subject: str | None
    asked_at: datetime


def _figures(rows: list[Any], url: str) -> dict[str, Any]:
    questions = sum(r["questions"] for r in rows)
    answers = {b: sum(r[f"band_{b}"] for r in rows) for b in BANDS}
    ttft = _summed(r["ttft_buckets"] for r in rows)
    retrieval = _summed(r["retrieval_buckets"] for r in rows)
    return {
        "questions": questions,
        "answers": answers,
        "gap_rate": round(answers["gap"] / questions, 4) if questions else 0.0,
        "flagged": sum(r["flagged"] for r in rows),
        "with_citations": round(sum(r["with_citations"] for r in rows) / questions, 4)
        if questions else 0.0,
        "fallbacks": sum(r["fallbacks"] for r in rows),
        "ttft_ms": Latency(p50=percentile(ttft, 0.5), p95=percentile(ttft, 0.95)),
        "retrieval_ms": Latency(p50=percentile(retrieval, 0.5), p95=percentile(retrieval, 0.95)),
        "questions_url": url,
    }  # fmt: skip


def _summed(arrays: Any) -> list[int]:
    total: list[int] = []
    for counts in arrays:
        for i, count in enumerate(counts or []):
            if i >= len(total):
                total.append(0)
            total[i] += count
    return total


#: the days a dashboard may ask about: dates outside are a client's mistake (a year-1 date
#: once overflowed the default range's arithmetic into a 500)
EARLIEST_DAY = date(1970, 1, 1)
LATEST_DAY = date(9999, 1, 1)


def _day_range(start: date | None, end: date | None, *, default_days: int) -> tuple[date, date]:
    """The first and last day asked for (the last ``default_days`` up to today by default),
    or a 422 problem for days out of range, in the wrong order or over a year apart."""
    for given in (start, end):
        if given is not None and not EARLIEST_DAY <= given <= LATEST_DAY:
            raise ProblemError(
                422, "Unprocessable", f"days must lie between {EARLIEST_DAY} and {LATEST_DAY}"
            )
    end = end or datetime.now(UTC).date()
    start = start or end - timedelta(days=default_days - 1)
    if start > end or (end - start).days > 366:
        raise ProblemError(422, "Unprocessable", "from must be before to, at most a year apart")
    return start, end


def _questions_url(**params: Any) -> str:
    given = {k: str(v) for k, v in params.items() if v not in (None, "")}
    return "/v1/metrics/quality/questions?" + urlencode(given)


@router.get("/v1/metrics/quality", summary="The quality dashboard's figures (staff)")
async def quality(
    staff: StaffDep,
    pool: PoolDep,
    start: Annotated[date | None, Query(alias="from", description="first day (UTC)")] = None,
    end: Annotated[date | None, Query(alias="to", description="last day (UTC)")] = None,
    group_by: Literal["persona", "subject", "none"] = "persona",
    persona: str | None = Query(default=None, max_length=63),
    subject: str | None = Query(default=None, max_length=200),
) -> Quality:
    """Per day and per persona (or subject): questions, answers by band, gap rate, flagged
    answers, citation use, fallbacks, time to first token and retrieval percentiles; over
    the range: top gap topics, most-cited and never-cited documents; now: the ingest backlog.
    """
    start, end = _day_range(start, end, default_days=14)
    classes = await teacher_classes(pool, staff)
    scope = repo.Scope(staff.tenant_id, start, end, classes, persona, subject)
    rows = await repo.daily_rows(pool=pool, scope=scope)
    groups: dict[tuple[date, str], list[Any]] = {}
    for row in rows:
        group = row[group_by] if group_by != "none" else "all"
        groups.setdefault((row["day"], group), []).append(row)
    filters: dict[str, Any] = {"persona": persona, "subject": subject}

    def behind(day: date, group: str) -> str:
        narrowed = dict(filters)
        if group_by != "none":
            narrowed[group_by] = group
        return _questions_url(day=day, **narrowed)

    series = [
        DayFigures(day=day, group=group, **_figures(members, behind(day, group)))
        for (day, group), members in sorted(groups.items())
    ]
    totals = Figures(**_figures(list(rows), _questions_url(start=start, end=end, **filters)))
    gaps = await repo.top_gap_topics(pool=pool, scope=scope)
    cited = await repo.most_cited(pool=pool, scope=scope)
    never = await repo.never_cited(pool=pool, scope=scope)
    backlog = await repo.ingest_backlog(pool=pool, tenant_id=staff.tenant_id)
    return Quality(
        start=start, end=end, group_by=group_by,
        scope="tenant" if classes is None else "classes", classes=classes or [],
        series=series, totals=totals,
        top_gap_topics=[
            GapTopic(topic=g["topic"], questions=g["questions"],
                     questions_url=_questions_url(start=start, end=end, topic=g["topic"],
                                                  **filters))
            for g in gaps
        ],
        most_cited=[CitedDocument(**dict(c)) for c in cited],
        never_cited=[CitedDocument(**dict(n)) for n in never],
        ingest_backlog=backlog,
    )  # fmt: skip


@router.get(
    "/v1/metrics/quality/questions", summary="The questions behind a dashboard figure (staff)"
)
async def quality_questions(
    staff: StaffDep,
    pool: PoolDep,
    day: date | None = None,
    start: date | None = None,
    end: date | None = None,
    persona: str | None = Query(default=None, max_length=63),
    subject: str | None = Query(default=None, max_length=200),
    band: Band | None = None,
    flagged: bool | None = None,
    topic: str | None = Query(default=None, max_length=200),
    limit: int = Query(default=100, ge=1, le=500),
) -> list[QuestionRow]:
    """Questions of a day (or range) with their answers, filtered like the figure."""
    first, last = _day_range(day or start, day or end or start, default_days=1)
    classes = await teacher_classes(pool, staff)
    rows = await repo.questions(
        pool=pool, tenant_id=staff.tenant_id, first=first, last=last, classes=classes,
        persona=persona, subject=subject, band=band, topic=topic, limit=limit,
    )  # fmt: skip
    found = [QuestionRow.model_validate(dict(r)) for r in rows]
    return found if flagged is None else [r for r in found if r.flagged == flagged]
