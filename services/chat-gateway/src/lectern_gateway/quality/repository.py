"""The quality dashboard's SQL: the daily aggregates (``quality_daily``, ``quality_gap_topics``,
``quality_citations``), counted as turns complete and answers are flagged, and read back by
day range, persona, subject and the teacher's classes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date
from typing import Any

from lectern_common.db.types import Queryable


@dataclass(frozen=True)
class Scope:
    """Which aggregate rows a report reads: the tenant's days, within the teacher's classes
    (None: an admin's whole tenant) and a persona's or subject's when named."""

    tenant_id: str
    start: date
    end: date
    classes: list[str] | None
    persona: str | None = None
    subject: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The WHERE clauses and their arguments."""
        args: list[Any] = [self.tenant_id, self.start, self.end]
        clauses = ["tenant_id = $1", "day BETWEEN $2 AND $3"]
        if self.classes is not None:
            args.append(["", *self.classes])
            clauses.append(f"class_id = ANY(${len(args)}::text[])")
        if self.persona is not None:
            args.append(self.persona)
            clauses.append(f"persona = ${len(args)}")
        if self.subject is not None:
            args.append(self.subject.lower())
            clauses.append(f"subject = ${len(args)}")
        return " AND ".join(clauses), args


async def daily_rows(*, pool: Queryable, scope: Scope) -> list[Any]:
    """The scope's ``quality_daily`` rows by day."""
    where, args = scope.where()
    return await pool.fetch(
        f"SELECT * FROM quality_daily WHERE {where} ORDER BY day",  # noqa: S608
        *args,
    )


async def top_gap_topics(*, pool: Queryable, scope: Scope) -> list[Any]:
    """The scope's ten gap topics asked most (``topic``, ``questions``)."""
    where, args = scope.where()
    return await pool.fetch(
        f"SELECT topic, sum(questions)::int AS questions FROM quality_gap_topics "  # noqa: S608
        f"WHERE {where} GROUP BY topic ORDER BY 2 DESC, topic LIMIT 10",
        *args,
    )


async def most_cited(*, pool: Queryable, scope: Scope) -> list[Any]:
    """The scope's ten documents cited most (``document_id``, ``title``, ``citations``)."""
    where, args = scope.where()
    return await pool.fetch(
        f"SELECT q.document_id, coalesce(d.title, '?') AS title, sum(q.citations)::int "  # noqa: S608
        f"AS citations FROM (SELECT * FROM quality_citations WHERE {where}) q "
        "LEFT JOIN documents d ON d.id = q.document_id "
        "GROUP BY q.document_id, d.title ORDER BY 3 DESC, 2 LIMIT 10",
        *args,
    )


async def never_cited(*, pool: Queryable, scope: Scope) -> list[Any]:
    """The tenant's first 50 indexed documents no answer of the scope cited."""
    where, args = scope.where()
    return await pool.fetch(
        f"WITH cited AS (SELECT document_id FROM quality_citations WHERE {where}) "  # noqa: S608
        "SELECT d.id AS document_id, d.title FROM documents d WHERE d.tenant_id = $1 "
        "AND d.status = 'indexed' AND d.deleted_at IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM cited WHERE cited.document_id = d.id) "
        "ORDER BY d.created_at LIMIT 50",
        *args,
    )


async def ingest_backlog(*, pool: Queryable, tenant_id: str) -> dict[str, int]:
    """How many of the tenant's documents are pending and processing now."""
    rows = await pool.fetch(
        "SELECT status, count(*)::int AS n FROM documents WHERE tenant_id = $1 "
        "AND status IN ('pending', 'processing') GROUP BY status",
        tenant_id,
    )
    return {"pending": 0, "processing": 0} | {r["status"]: r["n"] for r in rows}


async def questions(
    *,
    pool: Queryable,
    tenant_id: str,
    first: date,
    last: date,
    classes: list[str] | None,
    persona: str | None,
    subject: str | None,
    band: str | None,
    topic: str | None,
    limit: int,
) -> list[Any]:
    """Questions asked between two days with their answer's band and whether it was
    flagged, filtered like a dashboard figure; first asked first."""
    return await pool.fetch(
        """SELECT q.session_id, q.content AS question, a.id AS answer_message_id,
                  a.confidence_band AS band, s.persona_slug AS persona, s.subject,
                  q.created_at AS asked_at,
                  EXISTS (SELECT 1 FROM feedback_flags f WHERE f.message_id = a.id) AS flagged
           FROM chat_messages q
           JOIN chat_sessions s ON s.id = q.session_id
           LEFT JOIN LATERAL (
               SELECT id, confidence_band FROM chat_messages m
               WHERE m.session_id = q.session_id AND m.role = 'assistant'
                 AND m.created_at >= q.created_at ORDER BY m.created_at LIMIT 1) a ON true
           LEFT JOIN knowledge_gaps g ON g.message_id = a.id
           WHERE q.tenant_id = $1 AND q.role = 'user'
             AND (q.created_at AT TIME ZONE 'UTC')::date BETWEEN $2 AND $3
             AND ($4::text[] IS NULL OR coalesce(s.class_id, '') = ANY($4::text[]))
             AND ($5::text IS NULL OR coalesce(s.persona_slug, '') = $5)
             AND ($6::text IS NULL OR lower(coalesce(s.subject, '')) = lower($6))
             AND ($7::text IS NULL OR a.confidence_band = $7)
             AND ($8::text IS NULL OR g.topic = $8)
           ORDER BY q.created_at LIMIT $9""",
        tenant_id, first, last, None if classes is None else ["", *classes],
        persona, subject, band, topic, limit,
    )  # fmt: skip


async def uploaded_classes(*, pool: Queryable, tenant_id: str, user_id: str) -> list[str]:
    """The classes a user uploaded documents for."""
    rows = await pool.fetch(
        "SELECT DISTINCT class_id FROM documents WHERE tenant_id = $1 AND uploaded_by = $2 "
        "AND class_id IS NOT NULL",
        tenant_id, user_id,
    )  # fmt: skip
    return [r["class_id"] for r in rows]


# ---------------------------------------------------------------- counting

_TURN = """
INSERT INTO quality_daily (tenant_id, day, persona, subject, class_id, questions, band_high,
    band_medium, band_low, band_gap, with_citations, fallbacks, ttft_buckets,
    retrieval_buckets)
VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (tenant_id, day, persona, subject, class_id) DO UPDATE SET
    questions = quality_daily.questions + 1,
    band_high = quality_daily.band_high + EXCLUDED.band_high,
    band_medium = quality_daily.band_medium + EXCLUDED.band_medium,
    band_low = quality_daily.band_low + EXCLUDED.band_low,
    band_gap = quality_daily.band_gap + EXCLUDED.band_gap,
    with_citations = quality_daily.with_citations + EXCLUDED.with_citations,
    fallbacks = quality_daily.fallbacks + EXCLUDED.fallbacks,
    ttft_buckets = lectern_add_counts(quality_daily.ttft_buckets, EXCLUDED.ttft_buckets),
    retrieval_buckets = lectern_add_counts(
        quality_daily.retrieval_buckets, EXCLUDED.retrieval_buckets)
"""


async def count_turn(
    *,
    pool: Queryable,
    key: list[Any],
    bands: list[int],
    with_citations: int,
    fallback: int,
    ttft_buckets: list[int],
    retrieval_buckets: list[int],
) -> None:
    """Add one question to its day's row (``key``: tenant, day, persona, subject, class;
    ``bands``: one-hot high, medium, low, gap)."""
    await pool.execute(
        _TURN, *key, *bands, with_citations, fallback, ttft_buckets, retrieval_buckets
    )


async def count_gap_topic(*, pool: Queryable, key: list[Any], topic: str) -> None:
    """Add one question to a gap topic's day."""
    await pool.execute(
        "INSERT INTO quality_gap_topics (tenant_id, day, persona, subject, class_id, topic, "
        "questions) VALUES ($1, $2, $3, $4, $5, $6, 1) ON CONFLICT (tenant_id, day, "
        "persona, subject, class_id, topic) DO UPDATE SET "
        "questions = quality_gap_topics.questions + 1",
        *key, topic,
    )  # fmt: skip


async def count_citations(
    *, pool: Queryable, key: list[Any], document_id: uuid.UUID, citations: int
) -> None:
    """Add a document's citations to its day."""
    await pool.execute(
        "INSERT INTO quality_citations (tenant_id, day, persona, subject, class_id, "
        "document_id, citations) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT "
        "(tenant_id, day, persona, subject, class_id, document_id) DO UPDATE SET "
        "citations = quality_citations.citations + EXCLUDED.citations",
        *key, document_id, citations,
    )  # fmt: skip


async def count_flag(*, pool: Queryable, key: list[Any]) -> None:
    """Add one flagged answer to its day's row."""
    await pool.execute(
        "INSERT INTO quality_daily (tenant_id, day, persona, subject, class_id, flagged) "
        "VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT (tenant_id, day, persona, subject, "
        "class_id) DO UPDATE SET flagged = quality_daily.flagged + 1",
        *key,
    )
