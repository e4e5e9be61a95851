"""The index's reads other services ask the retriever for (``lectern.index.*``, issue 61):
chunks by id, with or without the caller's visibility, the tenant's common topic tags, and
words' BM25 idf. The retriever owns every read of ``chunks`` and the BM25 statistics; ingest
owns their writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lectern_common import bm25
from lectern_common.db.types import Queryable
from lectern_common.events import ChunkRow, ChunkVisibility
from lectern_common.events.retrieval import ScopeFilter

_COLUMNS = (
    "c.id AS chunk_id, c.document_id, c.chunk_index, c.kind, c.text, c.context_prefix, "
    "c.section_path, c.chapter, c.page_start, c.page_end, c.slide, c.collection, "
    "c.topic_tags, c.language, c.class_id, d.title, d.filename"
)


def _row(record: Any) -> ChunkRow:
    values = dict(record)
    values["section_path"] = list(values["section_path"] or [])
    values["topic_tags"] = list(values["topic_tags"] or [])
    return ChunkRow.model_validate(values)


async def chunks_by_id(
    pool: Queryable, *, tenant_id: str, chunk_ids: Sequence[Any]
) -> list[ChunkRow]:
    """The tenant's chunks of documents not deleted (the source viewer's read)."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "  # noqa: S608
        "WHERE c.id = ANY($1::uuid[]) AND c.tenant_id = $2 AND d.tenant_id = $2 "
        "AND d.deleted_at IS NULL",
        list(chunk_ids),
        tenant_id,
    )
    return [_row(r) for r in rows]


async def visible_chunks(
    pool: Queryable, *, tenant_id: str, chunk_ids: Sequence[Any], visible: ChunkVisibility
) -> list[ChunkRow]:
    """The given chunks the caller may see: the tenant's, of a live document, in an allowed
    collection; with ``visible.classes``, material of those classes or of none; with
    ``visible.scope``, a persona's."""
    scope = visible.scope
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "  # noqa: S608
        "WHERE c.id = ANY($1::uuid[]) AND c.tenant_id = $2 AND d.tenant_id = $2 AND c.active "
        "AND c.collection = ANY($3::text[]) AND d.status = 'indexed' AND d.deleted_at IS NULL "
        "AND ($4::text[] IS NULL OR c.class_id IS NULL OR c.class_id = ANY($4::text[])) "
        "AND (cardinality($5::text[]) = 0 OR lower(c.subject) = ANY($5::text[])) "
        "AND (cardinality($6::text[]) = 0 OR c.module_tag = ANY($6::text[])) "
        "AND (cardinality($7::text[]) = 0 OR c.class_id = ANY($7::text[])) "
        "AND (cardinality($8::text[]) = 0 OR c.topic_tags && $8::text[])",
        list(chunk_ids),
        tenant_id,
        list(visible.collections),
        None if visible.classes is None else list(visible.classes),
        [v.lower() for v in scope.subjects] if scope is not None else [],
        list(scope.modules) if scope is not None else [],
        list(scope.class_ids) if scope is not None else [],
        list(scope.topic_tags) if scope is not None else [],
    )
    return [_row(r) for r in rows]


async def common_topics(
    pool: Queryable, *, tenant_id: str, subject: str | None, limit: int
) -> list[str]:
    """The tenant's most common topic tags over searchable educational chunks (``subject``'s
    first when given)."""
    rows = await pool.fetch(
        "SELECT tag, count(*) AS n FROM ("
        "  SELECT unnest(topic_tags) AS tag, subject FROM chunks "
        "  WHERE tenant_id = $1 AND active AND collection = 'educational') t "
        "GROUP BY tag ORDER BY bool_or(subject IS NOT DISTINCT FROM $2) DESC, n DESC, tag "
        "LIMIT $3",
        tenant_id,
        subject,
        limit,
    )
    return [r["tag"] for r in rows]


async def word_idf(pool: Queryable, *, tenant_id: str, words: Sequence[str]) -> dict[str, float]:
    """Each word's BM25 idf in the tenant's library (its English lexeme's); none for a stop
    word or a word the library lacks."""
    if not words:
        return {}
    rows = await pool.fetch(
        """SELECT w.word, max(coalesce(s.df, 0)) AS df, max(coalesce(cs.chunk_count, 0)) AS n
           FROM unnest($2::text[]) AS w(word)
           CROSS JOIN LATERAL unnest(to_tsvector('english', w.word)) AS u
           LEFT JOIN bm25_vocabulary v ON v.term = u.lexeme
           LEFT JOIN bm25_term_stats s ON s.tenant_id = $1 AND s.term_id = v.id
           LEFT JOIN bm25_collection_stats cs ON cs.tenant_id = $1
           GROUP BY w.word""",
        tenant_id,
        list(words),
    )
    return {r["word"]: bm25.idf(chunk_count=int(r["n"]), df=int(r["df"])) for r in rows if r["df"]}


async def scope_count(
    pool: Queryable, *, tenant_id: str, collections: Sequence[str], scope: ScopeFilter
) -> int:
    """How many searchable content chunks of the tenant ``scope`` matches (a persona's)."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM chunks c WHERE c.tenant_id = $1 AND c.active "
            "AND c.kind IN ('text', 'table', 'qa') AND c.collection = ANY($2::text[]) "
            "AND (cardinality($3::text[]) = 0 OR lower(c.subject) = ANY($3::text[])) "
            "AND (cardinality($4::text[]) = 0 OR c.module_tag = ANY($4::text[])) "
            "AND (cardinality($5::text[]) = 0 OR c.class_id = ANY($5::text[])) "
            "AND (cardinality($6::text[]) = 0 OR c.topic_tags && $6::text[])",
            tenant_id,
            list(collections),
            [s.lower() for s in scope.subjects],
            list(scope.modules),
            list(scope.class_ids),
            list(scope.topic_tags),
        )
    )
