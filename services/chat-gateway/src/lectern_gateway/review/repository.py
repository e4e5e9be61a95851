"""The review queues' SQL: flags, knowledge gaps and their closures, student notices,
near-duplicates, freshness horizons and conflicting sources.

``classes`` is the teacher's classes (``quality.service.teacher_classes``): ``None`` for an
admin, who sees the whole tenant; otherwise class-less material and these classes'.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from lectern_common.db.types import Pool, Queryable
from lectern_common.events import ConflictPair

#: at most this many open gaps re-tried per request
MAX_RETRIES = 50


def _scope(column: str, n: int) -> str:
    """Class-less material, or the teacher's classes (``$n`` NULL: an admin sees all)."""
    return f"(${n}::text[] IS NULL OR {column} IS NULL OR {column} = ANY(${n}::text[]))"


# ---------------------------------------------------------------- flagged answers

_FLAG_SELECT = """
    SELECT f.*, m.content AS answer, m.citations,
           (SELECT q.content FROM chat_messages q WHERE q.session_id = m.session_id
              AND q.role = 'user' AND q.created_at <= m.created_at
            ORDER BY q.created_at DESC LIMIT 1) AS question
    FROM feedback_flags f JOIN chat_messages m ON m.id = f.message_id
    LEFT JOIN chat_sessions s ON s.id = f.session_id
    WHERE f.tenant_id = $1"""


async def flags(
    *, pool: Queryable, tenant_id: str, status: str | None, limit: int, classes: list[str] | None
) -> list[Any]:
    """Flags (of this status, any when None) with their answer and question, newest first."""
    return await pool.fetch(
        _FLAG_SELECT + " AND ($2::text IS NULL OR f.status = $2) AND " + _scope("s.class_id", 4)
        + " ORDER BY f.created_at DESC LIMIT $3",
        tenant_id, status, limit, classes,
    )  # fmt: skip


async def flag_visible(
    *, pool: Queryable, tenant_id: str, flag_id: uuid.UUID, classes: list[str] | None
) -> bool:
    """Whether the flag exists and is within the teacher's classes."""
    found = await pool.fetchval(
        _FLAG_SELECT + " AND f.id = $2 AND " + _scope("s.class_id", 3),
        tenant_id, flag_id, classes,
    )  # fmt: skip
    return found is not None


async def flag(*, pool: Queryable, tenant_id: str, flag_id: uuid.UUID) -> Any:
    """A flag with its answer and question, or None."""
    return await pool.fetchrow(_FLAG_SELECT + " AND f.id = $2", tenant_id, flag_id)


async def resolve_flag(
    *,
    pool: Queryable,
    tenant_id: str,
    flag_id: uuid.UUID,
    action: str,
    document_id: uuid.UUID | None,
    note: str | None,
    resolved_by: str,
) -> bool:
    """Mark a flag resolved; False when there is no such flag."""
    updated = await pool.fetchval(
        "UPDATE feedback_flags SET status = 'resolved', action = $3, document_id = $4, "
        "resolution = $5, resolved_by = $6, resolved_at = now() "
        "WHERE id = $1 AND tenant_id = $2 RETURNING id",
        flag_id, tenant_id, action, document_id, note, resolved_by,
    )  # fmt: skip
    return updated is not None


async def document_exists(*, pool: Queryable, tenant_id: str, document_id: uuid.UUID) -> bool:
    """Whether the tenant has this document."""
    found = await pool.fetchval(
        "SELECT 1 FROM documents WHERE id = $1 AND tenant_id = $2", document_id, tenant_id
    )
    return found is not None


# ---------------------------------------------------------------- knowledge gaps


async def gap_topics(
    *, pool: Queryable, tenant_id: str, limit: int, classes: list[str] | None
) -> list[Any]:
    """Open gaps grouped by topic (the 20 newest questions each), most asked first."""
    return await pool.fetch(
        "SELECT coalesce(g.topic, 'unknown') AS topic, count(*) AS count, "
        "count(DISTINCT g.user_id) AS students, max(g.created_at) AS last_seen, "
        "(array_agg(jsonb_build_object('id', g.id, 'user_id', g.user_id, 'question', "
        "g.question, 'confidence', g.confidence, 'created_at', g.created_at, 'retried_at', "
        "g.retried_at) ORDER BY g.created_at DESC))[1:20] AS questions "
        "FROM knowledge_gaps g LEFT JOIN chat_sessions s ON s.id = g.session_id "
        "WHERE g.tenant_id = $1 AND g.status = 'open' AND " + _scope("s.class_id", 3)
        + " GROUP BY 1 ORDER BY count(*) DESC, max(g.created_at) DESC LIMIT $2",
        tenant_id, limit, classes,
    )  # fmt: skip


async def open_gaps(
    *,
    pool: Queryable,
    tenant_id: str,
    topic: str | None,
    gap_ids: list[uuid.UUID] | None,
    classes: list[str] | None = None,
) -> list[Any]:
    """Open gaps of a topic (or these ids), oldest first, one per student and question;
    with ``classes``, only those asked in class-less sessions or sessions of these classes."""
    return await pool.fetch(
        "SELECT DISTINCT ON (g.user_id, lower(g.question)) g.*, s.subject AS session_subject, "
        "s.class_id, s.module_tag, s.grade_level AS session_grade "
        "FROM knowledge_gaps g LEFT JOIN chat_sessions s ON s.id = g.session_id "
        "WHERE g.tenant_id = $1 AND g.status = 'open' "
        "AND ($2::text IS NULL OR coalesce(g.topic, 'unknown') = $2) "
        "AND ($3::uuid[] IS NULL OR g.id = ANY($3)) "
        "AND ($5::text[] IS NULL OR s.class_id IS NULL OR s.class_id = ANY($5::text[])) "
        "ORDER BY g.user_id, lower(g.question), g.created_at LIMIT $4",
        tenant_id, topic, gap_ids, MAX_RETRIES, classes,
    )  # fmt: skip


async def mark_gap_retried(*, pool: Queryable, gap_id: uuid.UUID) -> None:
    """Record that a gap was re-tried (it stays open)."""
    await pool.execute("UPDATE knowledge_gaps SET retried_at = now() WHERE id = $1", gap_id)


async def answer_gaps(
    *,
    pool: Queryable,
    tenant_id: str,
    user_id: str,
    question: str,
    session_id: uuid.UUID,
    document_id: uuid.UUID | None,
) -> None:
    """Every open gap of this student with the same question is answered by this session."""
    await pool.execute(
        "UPDATE knowledge_gaps SET status = 'answered', retried_at = now(), "
        "answered_at = now(), answer_session_id = $4, answered_from = $5 "
        "WHERE tenant_id = $1 AND user_id = $2 AND lower(question) = lower($3) "
        "AND status = 'open'",
        tenant_id, user_id, question, session_id, document_id,
    )  # fmt: skip


_CLOSURE_COLUMNS = (
    "id, topic, document_id, status, answered, still_open, error, created_at, finished_at"
)


async def insert_gap_closure(
    *, pool: Queryable, tenant_id: str, topic: str, document_id: uuid.UUID, requested_by: str
) -> Any:
    """A new waiting closure of a gap topic by a document."""
    return await pool.fetchrow(
        f"INSERT INTO gap_closures (id, tenant_id, topic, document_id, requested_by) "  # noqa: S608 - constants
        f"VALUES ($1, $2, $3, $4, $5) RETURNING {_CLOSURE_COLUMNS}",
        uuid.uuid4(), tenant_id, topic, document_id, requested_by,
    )  # fmt: skip


async def gap_closures(*, pool: Queryable, tenant_id: str) -> list[Any]:
    """The tenant's 100 newest closures."""
    return await pool.fetch(
        f"SELECT {_CLOSURE_COLUMNS} FROM gap_closures WHERE tenant_id = $1 "  # noqa: S608 - constants
        "ORDER BY created_at DESC LIMIT 100",
        tenant_id,
    )


async def claim_gap_closures(*, pool: Queryable, limit: int, stale_run_s: float) -> list[Any]:
    """Claim closures whose document is done indexing (waiting ones, or running ones left
    for ``stale_run_s``), ``SKIP LOCKED``: run inside a transaction."""
    return await pool.fetch(
        "UPDATE gap_closures c SET status = 'running', started_at = now() "
        "FROM documents d WHERE c.id IN (SELECT x.id FROM gap_closures x "
        "JOIN documents y ON y.id = x.document_id WHERE (x.status = 'waiting' OR "
        "(x.status = 'running' AND x.started_at < now() - make_interval(secs => $2))) "
        "AND y.status NOT IN ('pending', 'processing') ORDER BY x.created_at "
        "FOR UPDATE OF x SKIP LOCKED LIMIT $1) AND d.id = c.document_id "
        "RETURNING c.id, c.tenant_id, c.topic, d.status AS document_status",
        limit, stale_run_s,
    )  # fmt: skip


async def fail_gap_closure(*, pool: Queryable, closure_id: uuid.UUID, error: str) -> None:
    """End a closure failed, with why."""
    await pool.execute(
        "UPDATE gap_closures SET status = 'failed', finished_at = now(), error = $2 "
        "WHERE id = $1",
        closure_id, error,
    )  # fmt: skip


async def finish_gap_closure(
    *, pool: Queryable, closure_id: uuid.UUID, answered: int, still_open: int
) -> None:
    """End a closure done, with how many questions were answered and how many stay open."""
    await pool.execute(
        "UPDATE gap_closures SET status = 'done', finished_at = now(), answered = $2, "
        "still_open = $3 WHERE id = $1",
        closure_id, answered, still_open,
    )  # fmt: skip


# ---------------------------------------------------------------- student notices

_NOTICE_COLUMNS = "id, kind, text, session_id, created_at, read_at"


async def insert_gap_notice(
    *,
    pool: Queryable,
    tenant_id: str,
    user_id: str,
    text: str,
    session_id: uuid.UUID,
    gap_id: uuid.UUID,
) -> None:
    """Tell a student their gap question is answered in a new session."""
    await pool.execute(
        "INSERT INTO student_notices (id, tenant_id, user_id, kind, text, session_id, "
        "gap_id) VALUES ($1, $2, $3, 'gap_answered', $4, $5, $6)",
        uuid.uuid4(), tenant_id, user_id, text, session_id, gap_id,
    )  # fmt: skip


async def notices(*, pool: Queryable, tenant_id: str, user_id: str, unread: bool) -> list[Any]:
    """A student's 100 newest notices (only the unread ones with ``unread``)."""
    return await pool.fetch(
        f"SELECT {_NOTICE_COLUMNS} FROM student_notices "  # noqa: S608 - constants
        "WHERE tenant_id = $1 AND user_id = $2 AND (NOT $3 OR read_at IS NULL) "
        "ORDER BY created_at DESC LIMIT 100",
        tenant_id, user_id, unread,
    )  # fmt: skip


async def mark_notice_read(
    *, pool: Queryable, tenant_id: str, user_id: str, notice_id: uuid.UUID
) -> Any:
    """Mark a student's notice read (once); the notice, or None."""
    return await pool.fetchrow(
        "UPDATE student_notices SET read_at = coalesce(read_at, now()) "  # noqa: S608 - constants
        "WHERE id = $1 AND tenant_id = $2 AND user_id = $3 "
        f"RETURNING {_NOTICE_COLUMNS}",
        notice_id, tenant_id, user_id,
    )  # fmt: skip


# ---------------------------------------------------------------- near-duplicates

#: a document's columns as a review queue shows it
BRIEF_COLUMNS = ("id", "title", "filename", "status", "subject", "created_at")


def _brief(alias: str) -> str:
    """The brief's columns of a documents alias, as one JSON object."""
    columns = ", ".join(f"{alias}.{c}" for c in BRIEF_COLUMNS)
    return f"row_to_json((SELECT b FROM (SELECT {columns}) b))"  # noqa: S608 - constants


_DUPLICATES = (
    f"SELECT d.id, d.near_duplicate_score AS score, {_brief('d')} AS doc, "  # noqa: S608 - constants
    f"{_brief('o')} AS other FROM documents d JOIN documents o ON o.id = d.near_duplicate_of "
    "WHERE d.tenant_id = $1 AND d.duplicate_review IS NULL AND d.status = 'indexed' "
    f"AND o.status = 'indexed' AND {_scope('d.class_id', 3)} ORDER BY d.created_at DESC "
    "LIMIT $2"
)


async def duplicates(
    *, pool: Queryable, tenant_id: str, classes: list[str] | None, limit: int
) -> list[Any]:
    """Undecided near-duplicate pairs of indexed documents (``doc``, ``other`` as JSON)."""
    return await pool.fetch(_DUPLICATES, tenant_id, limit, classes)


async def near_duplicate_of(
    *, pool: Queryable, tenant_id: str, document_id: uuid.UUID, classes: list[str] | None
) -> Any:
    """The row (``near_duplicate_of``) of a document the teacher may see, or None."""
    return await pool.fetchrow(
        "SELECT near_duplicate_of FROM documents d WHERE id = $1 AND tenant_id = $2 AND "  # noqa: S608 - constants
        + _scope("d.class_id", 3),
        document_id, tenant_id, classes,
    )  # fmt: skip


async def set_duplicate_review(*, pool: Queryable, document_id: uuid.UUID, review: str) -> None:
    """Record the duplicate decision (``distinct`` also removes the link)."""
    await pool.execute(
        "UPDATE documents SET duplicate_review = $2, near_duplicate_of = CASE WHEN $2 = "
        "'distinct' THEN NULL ELSE near_duplicate_of END, updated_at = now() WHERE id = $1",
        document_id, review,
    )  # fmt: skip


# ---------------------------------------------------------------- freshness

_STALE = (
    f"SELECT {', '.join('d.' + c for c in BRIEF_COLUMNS)}, "  # noqa: S608 - constants
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


async def stale_documents(
    *, pool: Queryable, tenant_id: str, default_days: int, classes: list[str] | None, limit: int
) -> list[Any]:
    """Indexed documents past their subject's horizon (else ``default_days``), most overdue
    first."""
    return await pool.fetch(_STALE, tenant_id, default_days, limit, classes)


async def horizons(*, pool: Queryable, tenant_id: str) -> dict[str, int]:
    """The tenant's freshness horizons: days by subject."""
    rows = await pool.fetch(
        "SELECT subject, days FROM freshness_horizons WHERE tenant_id = $1 ORDER BY subject",
        tenant_id,
    )
    return {r["subject"]: r["days"] for r in rows}


async def set_horizon(*, pool: Queryable, tenant_id: str, subject: str, days: int) -> None:
    """Set a subject's freshness horizon."""
    await pool.execute(
        "INSERT INTO freshness_horizons (tenant_id, subject, days) VALUES ($1, $2, $3) "
        "ON CONFLICT (tenant_id, subject) DO UPDATE SET days = excluded.days",
        tenant_id, subject, days,
    )  # fmt: skip


# ---------------------------------------------------------------- conflicting sources

_ADD_CONFLICT = """
    INSERT INTO source_conflicts (id, tenant_id, chunk_a, chunk_b, document_a, document_b, kind,
        statement_a, statement_b, detail, similarity)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (chunk_a, chunk_b) DO NOTHING"""


async def add_conflicts(*, pool: Pool, tenant_id: str, pairs: Sequence[ConflictPair]) -> int:
    """Queue the conflicting pairs ingest found, each pair once (one already queued, open or
    resolved, stays as it is); how many were new. A pair whose chunk or document is gone by
    now is dropped: its row would have been deleted with them (``ON DELETE CASCADE``)."""
    added = 0
    async with pool.acquire() as conn, conn.transaction():
        for p in pairs:
            try:
                async with conn.transaction():  # a savepoint: one gone pair spoils no other
                    status = await conn.execute(
                        _ADD_CONFLICT, uuid.uuid4(), tenant_id, p.chunk_a, p.chunk_b,
                        p.document_a, p.document_b, p.kind, p.statement_a, p.statement_b,
                        p.detail, p.similarity,
                    )  # fmt: skip
            except asyncpg.ForeignKeyViolationError:
                continue
            added += status.endswith(" 1")
    return added


#: a conflict with its documents' titles (the passages are the index's: the retriever's)
_CONFLICT_SELECT = """
    SELECT x.*, da.title AS title_a, db.title AS title_b
    FROM source_conflicts x
    JOIN documents da ON da.id = x.document_a JOIN documents db ON db.id = x.document_b
    WHERE x.tenant_id = $1"""


async def conflicts(
    *,
    pool: Queryable,
    tenant_id: str,
    status: str | None,
    document_id: uuid.UUID | None,
    limit: int,
    classes: list[str] | None,
) -> list[Any]:
    """Conflicts between searchable documents (of this status, about this document),
    newest first."""
    return await pool.fetch(
        _CONFLICT_SELECT + " AND ($2::text IS NULL OR x.status = $2) "
        "AND ($3::uuid IS NULL OR $3 IN (x.document_a, x.document_b)) "
        "AND da.status = 'indexed' AND db.status = 'indexed' "
        f"AND ({_scope('da.class_id', 5)} OR {_scope('db.class_id', 5)}) "
        "ORDER BY x.created_at DESC LIMIT $4",
        tenant_id, status, document_id, limit, classes,
    )  # fmt: skip


async def conflict(
    *,
    pool: Queryable,
    tenant_id: str,
    conflict_id: uuid.UUID,
    classes: list[str] | None = None,
) -> Any:
    """A conflict (one side within the teacher's classes), or None."""
    return await pool.fetchrow(
        _CONFLICT_SELECT + f" AND x.id = $2 AND ({_scope('da.class_id', 3)} OR "
        f"{_scope('db.class_id', 3)})",
        tenant_id, conflict_id, classes,
    )  # fmt: skip


async def resolve_conflict(
    *, pool: Queryable, conflict_id: uuid.UUID, resolution: str, note: str | None, resolved_by: str
) -> None:
    """Mark a conflict resolved."""
    await pool.execute(
        "UPDATE source_conflicts SET status = 'resolved', resolution = $2, note = $3, "
        "resolved_by = $4, resolved_at = now() WHERE id = $1",
        conflict_id, resolution, note, resolved_by,
    )  # fmt: skip
