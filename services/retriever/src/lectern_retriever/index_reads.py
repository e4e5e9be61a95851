"""The index's reads other services ask the retriever for (``lectern.index.*``, issue 61):
chunks by id, with or without the caller's visibility, the tenant's common topic tags, a
persona's count, the material of quizzes, drill and the syllabus, a document's outline in
vectors, chunks' stored vectors (the re-ranker's bi-encoder) and words' BM25 idf. The
retriever owns every read of ``chunks``, ``embedding_models`` and the BM25 statistics;
ingest owns their writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lectern_common import bm25
from lectern_common.db.types import Connection, Pool, Queryable
from lectern_common.events import (
    ChunkRow,
    ChunkVector,
    ChunkVisibility,
    IndexChunksReply,
    IndexChunksRequest,
    IndexCountReply,
    IndexCountRequest,
    IndexMaterialReply,
    IndexMaterialRequest,
    IndexOutlineReply,
    IndexOutlineRequest,
    IndexTopicsReply,
    IndexTopicsRequest,
    IndexVectorsReply,
    IndexVectorsRequest,
    MaterialFilter,
    MaterialRow,
    SectionStandards,
)
from lectern_common.events.index import SectionOutline
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
        f"SELECT {_COLUMNS} FROM chunks c JOIN index_documents d ON d.document_id = c.document_id "  # noqa: S608
        "WHERE c.id = ANY($1::uuid[]) AND c.tenant_id = $2 AND d.tenant_id = $2",
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
        f"SELECT {_COLUMNS} FROM chunks c JOIN index_documents d ON d.document_id = c.document_id "  # noqa: S608
        "WHERE c.id = ANY($1::uuid[]) AND c.tenant_id = $2 AND d.tenant_id = $2 AND c.active "
        "AND c.collection = ANY($3::text[]) AND d.searchable "
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


def material_conditions(tenant_id: str, selected: MaterialFilter) -> tuple[str, list[Any]]:
    """The WHERE clause (on ``d`` the index's documents and ``c`` chunks) selecting live
    material.

    Subject matches case-insensitively; material uploaded without a subject, module or class
    is not excluded by a filter on them (it would silently disappear otherwise)."""
    args: list[Any] = [tenant_id, list(selected.collections)]
    where = [
        "c.tenant_id = $1", "c.active", "d.searchable",
        "c.collection = ANY($2::text[])",
    ]  # fmt: skip
    if selected.subject:
        args.append(selected.subject)
        where.append(f"(d.subject IS NULL OR lower(d.subject) = lower(${len(args)}))")
    if selected.module:
        args.append(selected.module)
        where.append(f"(d.module_tag IS NULL OR d.module_tag = ${len(args)})")
    if selected.class_id:
        args.append(selected.class_id)
        where.append(f"(d.class_id IS NULL OR d.class_id = ${len(args)})")
    if selected.visible_classes is not None:  # a student: their classes' and unassigned
        args.append(list(selected.visible_classes))
        where.append(f"(d.class_id IS NULL OR d.class_id = ANY(${len(args)}::text[]))")
    if selected.document_ids:
        args.append(list(selected.document_ids))
        where.append(f"d.document_id = ANY(${len(args)}::uuid[])")
    return " AND ".join(where), args


#: a material page's texts stop at about this many characters (its reply's JSON must stay
#: under NATS's default 1 MB message; the caller pages on from the rows it got)
MATERIAL_PAGE_CHARS = 400_000

_MATERIAL = {
    # content chunks and Q&A pairs in document order (oldest document first), whole texts
    "quiz": (
        "c.text", "c.kind IN ('text', 'table', 'qa')",
        "d.created_at, d.document_id, c.kind = 'qa', c.chunk_index, c.id",
    ),
    # the outline: text and table chunks by module, each text's opening
    "syllabus": (
        "left(c.text, 1200)", "c.kind IN ('text', 'table')",
        "d.module_tag NULLS LAST, d.created_at, d.document_id, c.chunk_index, c.id",
    ),
}  # fmt: skip


async def material(
    pool: Queryable,
    *,
    tenant_id: str,
    selected: MaterialFilter,
    purpose: str,
    offset: int,
    limit: int,
) -> tuple[list[MaterialRow], bool]:
    """A page of the material ``selected`` picks for ``purpose`` (``_MATERIAL``), and
    whether more follows."""
    text, kinds, order = _MATERIAL[purpose]
    where, args = material_conditions(tenant_id, selected)
    rows = await pool.fetch(
        f"SELECT c.id AS chunk_id, c.document_id, c.kind, {text} AS text, c.section_path, "  # noqa: S608
        "c.page_start, c.page_end, c.parent_chunk_id, c.topic_tags, d.title, d.subject, "
        "d.module_tag, d.page_count, d.filename, d.collection, d.created_at "
        "FROM chunks c JOIN index_documents d ON d.document_id = c.document_id "
        f"WHERE {where} AND {kinds} "
        f"ORDER BY {order} OFFSET {int(offset)} LIMIT {int(limit) + 1}",
        *args,
    )
    page: list[MaterialRow] = []
    size = 0
    for r in rows[:limit]:
        size += len(r["text"])
        if page and size > MATERIAL_PAGE_CHARS:
            return page, True  # the rest on the next page: a reply stays under NATS's 1 MB
        page.append(
            MaterialRow.model_validate(
                {**dict(r), "section_path": list(r["section_path"] or []),
                 "topic_tags": list(r["topic_tags"] or [])}
            )
        )  # fmt: skip
    return page, len(rows) > limit


def _floats(vector: Any) -> list[float]:
    """A vector as floats, whether the driver decoded it to an array or a pgvector object."""
    values = vector.to_list() if hasattr(vector, "to_list") else vector
    return [float(v) for v in values]


async def outline(
    conn: Connection, *, tenant_id: str, document_id: Any, max_sections: int
) -> tuple[list[float] | None, list[SectionOutline], list[SectionStandards]]:
    """The document's mean embedding, its largest top-level sections' and the standards of
    each section, in one transaction (a re-index cannot switch the vectors between them)."""
    async with conn.transaction():
        centroid = await conn.fetchval(
            "SELECT avg(embedding) FROM chunks WHERE document_id = $1 AND tenant_id = $2 "
            "AND kind IN ('text', 'table')",
            document_id, tenant_id,
        )  # fmt: skip
        sections = await conn.fetch(
            "SELECT section_path[1:2] AS path, avg(embedding) AS centroid, count(*) AS n, "
            "min(chunk_index) AS first FROM chunks WHERE document_id = $1 AND tenant_id = $2 "
            "AND kind IN ('text', 'table') AND cardinality(section_path) > 0 "
            "GROUP BY 1 ORDER BY count(*) DESC LIMIT $3",
            document_id, tenant_id, max_sections,
        )  # fmt: skip
        tagged = await conn.fetch(
            "SELECT c.section_path[1:2] AS path, array_agg(DISTINCT s) AS codes "
            "FROM chunks c, unnest(c.curriculum_standards) s "
            "WHERE c.document_id = $1 AND c.tenant_id = $2 AND cardinality(c.section_path) > 0 "
            "GROUP BY 1",
            document_id, tenant_id,
        )  # fmt: skip
    return (
        None if centroid is None else _floats(centroid),
        [
            SectionOutline(
                path=list(r["path"]),
                centroid=_floats(r["centroid"]),
                chunks=r["n"],
                first=r["first"],
            )
            for r in sections
        ],
        [SectionStandards(path=list(r["path"]), standards=sorted(r["codes"])) for r in tagged],
    )


#: a vectors reply stops adding vectors past this many characters of base64 (NATS's message
#: is at most 1 MB; 500 chunks of 384 float32 values would be 1.02 MB)
VECTORS_REPLY_CHARS = 700_000


async def stored_vectors(
    pool: Queryable, *, tenant_id: str, chunk_ids: Sequence[Any], model: str
) -> tuple[tuple[str, int] | None, list[ChunkVector], bool]:
    """The index's model and dimension (None before one is recorded), the stored embeddings
    of the tenant's chunks among ``chunk_ids`` when the index holds ``model``'s vectors, and
    whether some were left out for the reply's size. One statement: a re-index cannot switch
    the model between the check and the read."""
    rows = await pool.fetch(
        "SELECT m.name, m.dimension, c.id, c.embedding FROM embedding_models m "
        "LEFT JOIN chunks c ON m.name = $3 AND c.tenant_id = $1 AND c.id = ANY($2::uuid[]) "
        "AND c.embedding IS NOT NULL WHERE m.id = 1",
        tenant_id, list(chunk_ids), model,
    )  # fmt: skip
    if not rows:
        return None, [], False
    vectors: list[ChunkVector] = []
    size = 0
    for r in rows:
        if r["id"] is None:  # the index holds another model's vectors, or none was found
            continue
        raw = r["embedding"]
        found = ChunkVector.of(r["id"], raw.to_numpy() if hasattr(raw, "to_numpy") else raw)
        size += len(found.vector)
        if size > VECTORS_REPLY_CHARS:
            return (rows[0]["name"], rows[0]["dimension"]), vectors, True
        vectors.append(found)
    return (rows[0]["name"], rows[0]["dimension"]), vectors, False


# ---------------------------------------------------------------- the replies


async def answer_chunks(pool: Queryable, request: IndexChunksRequest) -> IndexChunksReply:
    """``lectern.index.chunks.v1``: with the caller's visibility when it gives one."""
    if request.visible is None:
        found = await chunks_by_id(pool, tenant_id=request.tenant_id, chunk_ids=request.chunk_ids)
    else:
        found = await visible_chunks(
            pool, tenant_id=request.tenant_id, chunk_ids=request.chunk_ids,
            visible=request.visible,
        )  # fmt: skip
    return IndexChunksReply(request_id=request.request_id, chunks=found)


async def answer_count(pool: Queryable, request: IndexCountRequest) -> IndexCountReply:
    """``lectern.index.count.v1``."""
    found = await scope_count(
        pool, tenant_id=request.tenant_id, collections=request.collections, scope=request.scope
    )
    return IndexCountReply(request_id=request.request_id, chunks=found)


async def answer_topics(pool: Queryable, request: IndexTopicsRequest) -> IndexTopicsReply:
    """``lectern.index.topics.v1``."""
    found = await common_topics(
        pool, tenant_id=request.tenant_id, subject=request.course_subject, limit=request.limit
    )
    return IndexTopicsReply(request_id=request.request_id, topics=found)


async def answer_material(pool: Queryable, request: IndexMaterialRequest) -> IndexMaterialReply:
    """``lectern.index.material.v1``."""
    rows, more = await material(
        pool, tenant_id=request.tenant_id, selected=request.filter, purpose=request.purpose,
        offset=request.offset, limit=request.limit,
    )  # fmt: skip
    return IndexMaterialReply(request_id=request.request_id, rows=rows, more=more)


async def answer_outline(pool: Pool, request: IndexOutlineRequest) -> IndexOutlineReply:
    """``lectern.index.outline.v1`` (from ``pool``'s one connection, one transaction)."""
    async with pool.acquire() as conn:
        centroid, sections, standards = await outline(
            conn, tenant_id=request.tenant_id, document_id=request.document_id,
            max_sections=request.max_sections,
        )  # fmt: skip
    return IndexOutlineReply(
        request_id=request.request_id, centroid=centroid, sections=sections, standards=standards
    )


async def answer_vectors(pool: Queryable, request: IndexVectorsRequest) -> IndexVectorsReply:
    """``lectern.index.vectors.v1``."""
    index, vectors, more = await stored_vectors(
        pool, tenant_id=request.tenant_id, chunk_ids=request.chunk_ids, model=request.model
    )
    return IndexVectorsReply(
        request_id=request.request_id, model=None if index is None else index[0],
        dimension=None if index is None else index[1], vectors=vectors, more=more,
    )  # fmt: skip
