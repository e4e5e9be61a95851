"""Postgres access of the study tools: the material a quiz or syllabus reads, and quizzes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from lectern_common.db.types import Queryable


async def insert_quiz(pool: Queryable, values: dict[str, Any]) -> dict[str, Any]:
    """Store a generated quiz; the stored row."""
    row = await pool.fetchrow(
        "INSERT INTO quizzes (id, tenant_id, created_by, creator_role, title, difficulty, "
        "request, generator, uses_assessment, assigned_class_id, questions) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11::jsonb) RETURNING *",
        values["id"], values["tenant_id"], values["created_by"], values["creator_role"],
        values["title"], values["difficulty"], values["request"], values["generator"],
        values["uses_assessment"], values["assigned_class_id"], values["questions"],
    )  # fmt: skip
    return dict(row)


async def get_quiz(pool: Queryable, *, tenant_id: str, quiz_id: uuid.UUID) -> dict[str, Any] | None:
    """A quiz of the tenant, questions decoded."""
    row = await pool.fetchrow(
        "SELECT * FROM quizzes WHERE id = $1 AND tenant_id = $2", quiz_id, tenant_id
    )
    return dict(row) if row is not None else None


async def list_quizzes(
    pool: Queryable, *, tenant_id: str, user_id: str | None, classes: list[str], limit: int
) -> list[dict[str, Any]]:
    """Quizzes newest first: a student's own and those assigned to one of their classes;
    staff (``user_id`` None): all."""
    if user_id is None:
        rows = await pool.fetch(
            "SELECT * FROM quizzes WHERE tenant_id = $1 ORDER BY created_at DESC LIMIT $2",
            tenant_id,
            limit,
        )
    else:
        rows = await pool.fetch(
            "SELECT * FROM quizzes WHERE tenant_id = $1 AND (created_by = $2 OR "
            "assigned_class_id = ANY($3::text[])) ORDER BY created_at DESC LIMIT $4",
            tenant_id,
            user_id,
            classes,
            limit,
        )
    return [dict(r) for r in rows]


async def insert_attempt(conn: Queryable, values: dict[str, Any]) -> None:
    """Store a checked attempt."""
    await conn.execute(
        "INSERT INTO quiz_attempts (id, quiz_id, tenant_id, user_id, answers, results, "
        "correct, total) VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8)",
        values["id"], values["quiz_id"], values["tenant_id"], values["user_id"],
        values["answers"], values["results"], values["correct"], values["total"],
    )  # fmt: skip


# --- curriculum standards (study/curriculum.py) -----------------------------------------


async def upsert_standards(conn: Queryable, rows: Sequence[tuple[Any, ...]]) -> None:
    """Add or replace standards by code: rows of (tenant, code, description, subject, grade,
    embedding)."""
    await conn.executemany(
        "INSERT INTO curriculum_standards (tenant_id, code, description, subject, "
        "grade_level, embedding) VALUES ($1, $2, $3, $4, $5, $6) "
        "ON CONFLICT (tenant_id, code) DO UPDATE SET description = excluded.description, "
        "subject = excluded.subject, grade_level = excluded.grade_level, "
        "embedding = excluded.embedding, updated_at = now()",
        rows,
    )


async def standards(conn: Queryable, *, tenant_id: str, subject: str | None) -> list[Any]:
    """The tenant's standards (of ``subject``, case aside, when given), by code."""
    return list(
        await conn.fetch(
            "SELECT code, description, subject, grade_level AS grade FROM curriculum_standards "
            "WHERE tenant_id = $1 AND ($2::text IS NULL OR lower(subject) = lower($2)) "
            "ORDER BY code",
            tenant_id, subject,
        )
    )  # fmt: skip


async def known_standards(conn: Queryable, *, tenant_id: str, codes: list[str]) -> set[str]:
    """Which of ``codes`` the tenant has uploaded."""
    rows = await conn.fetch(
        "SELECT code FROM curriculum_standards WHERE tenant_id = $1 AND code = ANY($2)",
        tenant_id, codes,
    )  # fmt: skip
    return {r["code"] for r in rows}


async def nearest_standards(
    conn: Queryable, *, tenant_id: str, vector: Any, subject: str | None, grade: int | None,
    limit: int,
) -> list[Any]:  # fmt: skip
    """The ``limit`` standards nearest ``vector`` of the subject (or none) and grade +/- 1
    (or none), with their cosine similarity as ``score``."""
    return list(
        await conn.fetch(
            "SELECT code, description, 1 - (embedding <=> $2) AS score FROM curriculum_standards "
            "WHERE tenant_id = $1 AND ($3::text IS NULL OR subject IS NULL OR "
            "lower(subject) = lower($3)) AND ($4::smallint IS NULL OR grade_level IS NULL OR "
            "abs(grade_level - $4) <= 1) ORDER BY embedding <=> $2 LIMIT $5",
            tenant_id, vector, subject, grade, limit,
        )
    )  # fmt: skip


async def indexed_document(conn: Queryable, *, tenant_id: str, document_id: uuid.UUID) -> Any:
    """The indexed document's subject, grade and standards, or None."""
    return await conn.fetchrow(
        "SELECT id, subject, grade_level, curriculum_standards FROM documents "
        "WHERE id = $1 AND tenant_id = $2 AND status = 'indexed' AND deleted_at IS NULL",
        document_id, tenant_id,
    )  # fmt: skip


async def set_document_standards(conn: Queryable, document_id: uuid.UUID, codes: list[str]) -> None:
    """The document's confirmed standards (its chunks' are ingest's: ChunkCurriculumRequest)."""
    await conn.execute(
        "UPDATE documents SET curriculum_standards = $2, updated_at = now() WHERE id = $1",
        document_id, codes,
    )  # fmt: skip
