"""Postgres access of the study tools: the material a quiz or syllabus reads, and quizzes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from lectern_common.db.types import Queryable

#: at most this many chunks are read to draw a quiz from (about a 500-page book)
MAX_QUIZ_CHUNKS = 5000


def material_conditions(
    *,
    tenant_id: str,
    collections: Sequence[str],
    subject: str | None,
    module: str | None,
    class_id: str | None,
    document_ids: Sequence[uuid.UUID],
    visible_classes: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (on ``d`` documents and ``c`` chunks) selecting live material.

    Subject matches case-insensitively; material uploaded without a subject, module or class
    is not excluded by a filter on them (it would silently disappear otherwise)."""
    args: list[Any] = [tenant_id, list(collections)]
    where = [
        "c.tenant_id = $1", "c.active", "d.status = 'indexed'", "d.deleted_at IS NULL",
        "c.collection = ANY($2::text[])",
    ]  # fmt: skip
    if subject:
        args.append(subject)
        where.append(f"(d.subject IS NULL OR lower(d.subject) = lower(${len(args)}))")
    if module:
        args.append(module)
        where.append(f"(d.module_tag IS NULL OR d.module_tag = ${len(args)})")
    if class_id:
        args.append(class_id)
        where.append(f"(d.class_id IS NULL OR d.class_id = ${len(args)})")
    if visible_classes is not None:  # a student: their classes' material and unassigned
        args.append(list(visible_classes))
        where.append(f"(d.class_id IS NULL OR d.class_id = ANY(${len(args)}::text[]))")
    if document_ids:
        args.append(list(document_ids))
        where.append(f"d.id = ANY(${len(args)}::uuid[])")
    return " AND ".join(where), args


async def quiz_material(pool: Queryable, where: str, args: list[Any]) -> list[Any]:
    """Content chunks and Q&A pairs in document order (oldest document first)."""
    return list(
        await pool.fetch(
            "SELECT c.id, c.document_id, d.title AS document_title, c.kind, c.text, "  # noqa: S608
            "c.section_path, c.page_start, c.page_end, c.parent_chunk_id "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE {where} AND c.kind IN ('text', 'table', 'qa') "
            "ORDER BY d.created_at, d.id, c.kind = 'qa', c.chunk_index "
            f"LIMIT {MAX_QUIZ_CHUNKS}",
            *args,
        )
    )


async def syllabus_material(pool: Queryable, where: str, args: list[Any]) -> list[Any]:
    """Every content chunk's outline fields, with its document's, in document order."""
    return list(
        await pool.fetch(
            "SELECT c.id, c.document_id, c.section_path, c.page_start, c.page_end, "  # noqa: S608
            "left(c.text, 1200) AS text, c.topic_tags, d.title, d.subject, d.module_tag, "
            "d.page_count, d.filename, d.collection, d.created_at "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE {where} AND c.kind IN ('text', 'table') "
            "ORDER BY d.module_tag NULLS LAST, d.created_at, d.id, c.chunk_index",
            *args,
        )
    )


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


async def document_centroid(conn: Queryable, document_id: uuid.UUID) -> Any:
    """The mean embedding of the document's text and table chunks (None without any)."""
    return await conn.fetchval(
        "SELECT avg(embedding) FROM chunks WHERE document_id = $1 AND kind IN ('text', 'table')",
        document_id,
    )


async def section_centroids(conn: Queryable, document_id: uuid.UUID, *, limit: int) -> list[Any]:
    """The document's ``limit`` largest top-level sections: path, mean embedding, chunks and
    first chunk."""
    return list(
        await conn.fetch(
            "SELECT section_path[1:2] AS path, avg(embedding) AS centroid, count(*) AS n, "
            "min(chunk_index) AS first FROM chunks WHERE document_id = $1 "
            "AND kind IN ('text', 'table') AND cardinality(section_path) > 0 "
            "GROUP BY 1 ORDER BY count(*) DESC LIMIT $2",
            document_id, limit,
        )
    )  # fmt: skip


async def section_standards(
    conn: Queryable, document_id: uuid.UUID
) -> dict[tuple[str, ...], list[str]]:
    """The standards each top-level section's chunks carry."""
    rows = await conn.fetch(
        "SELECT c.section_path[1:2] AS path, array_agg(DISTINCT s) AS codes "
        "FROM chunks c, unnest(c.curriculum_standards) s WHERE c.document_id = $1 GROUP BY 1",
        document_id,
    )
    return {tuple(r["path"]): list(r["codes"]) for r in rows}
