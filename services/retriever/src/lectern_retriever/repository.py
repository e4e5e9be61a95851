"""SQL of the retriever: filters, query-term statistics, dense (HNSW) and sparse (BM25) search."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pgvector import SparseVector

from lectern_common.bm25 import SPARSE_DIM
from lectern_common.db.types import Connection, Queryable
from lectern_common.events import RetrievalFilters
from lectern_common.events.retrieval import CONTENT_KINDS
from lectern_retriever import tenant_indexes

# What a search returns per hit: enough to fuse (ids, tags for the tag boost) and no more.
# The candidate columns (text, metadata, the document's title) are fetched once, for the
# fused top k only: most hits of both sides never reach the reply.
_HIT_COLUMNS = "c.id AS chunk_id, c.document_id, c.topic_tags"

# The Candidate fields.
_CANDIDATE_COLUMNS = """
    c.id AS chunk_id, c.document_id, d.title, c.text, c.kind, c.context_prefix,
    c.section_path, c.page_start, c.page_end, c.slide, c.time_start, c.token_count,
    c.subject, c.grade_level, c.module_tag, c.class_id, c.content_type, c.language,
    c.collection, c.topic_tags, c.curriculum_standards, c.source_priority, c.freshness_date,
    c.chapter, c.uploaded_by, d.uploader_role, d.metadata AS document_metadata"""


@dataclass
class SqlFilter:
    """A WHERE clause over ``chunks c`` and its parameters ($1 is always the tenant)."""

    clause: str
    params: list[Any] = field(default_factory=list)

    def placeholder(self, value: Any) -> str:
        """Add a parameter and return its placeholder."""
        self.params.append(value)
        return f"${len(self.params)}"


def build_filter(*, tenant_id: str, filters: RetrievalFilters) -> SqlFilter:
    """Tenant, collection, metadata and document-status conditions, applied before vector math."""
    sql = SqlFilter(clause="", params=[tenant_id])
    parts = [
        "c.tenant_id = $1",
        # active: the chunk's document is 'indexed' (kept in step by a trigger, migration 0008)
        "c.active",
        f"c.collection = ANY({sql.placeholder(list(filters.collections))}::text[])",
    ]
    kinds = list(filters.kinds) if filters.kinds else list(CONTENT_KINDS)
    parts.append(f"c.kind = ANY({sql.placeholder(kinds)}::text[])")

    def tagged(column: str, condition: str) -> str:
        if filters.include_untagged:
            return f"({column} IS NULL OR {condition})"
        return condition

    if filters.subject is not None:
        subject = sql.placeholder(filters.subject.strip())
        # lower(subject), never subject: the expression index (migration 0028) serves both
        parts.append(tagged("lower(c.subject)", f"lower(c.subject) = lower({subject})"))
    if filters.grade_level is not None:
        if filters.grade_within_one:
            low = sql.placeholder(filters.grade_level - 1)
            high = sql.placeholder(filters.grade_level + 1)
            condition = f"c.grade_level BETWEEN {low}::smallint AND {high}::smallint"
        else:
            condition = f"c.grade_level = {sql.placeholder(filters.grade_level)}::smallint"
        parts.append(tagged("c.grade_level", condition))
    if filters.module_tag is not None:
        parts.append(
            tagged("c.module_tag", f"c.module_tag = {sql.placeholder(filters.module_tag)}")
        )
    if filters.class_id is not None:
        class_id = sql.placeholder(filters.class_id)
        if filters.include_unassigned:
            parts.append(f"(c.class_id = {class_id} OR c.class_id IS NULL)")
        else:
            parts.append(f"c.class_id = {class_id}")
    if filters.class_ids is not None:
        classes = f"c.class_id = ANY({sql.placeholder(list(filters.class_ids))}::text[])"
        if filters.include_unassigned:
            classes = f"({classes} OR c.class_id IS NULL)"
        parts.append(classes)
    scope = filters.scope
    if scope is not None:
        if scope.subjects:
            wanted = sql.placeholder([v.lower() for v in scope.subjects])
            parts.append(f"lower(c.subject) = ANY({wanted}::text[])")
        if scope.modules:
            parts.append(f"c.module_tag = ANY({sql.placeholder(scope.modules)}::text[])")
        if scope.class_ids:
            parts.append(f"c.class_id = ANY({sql.placeholder(scope.class_ids)}::text[])")
        if scope.topic_tags:
            parts.append(f"c.topic_tags && {sql.placeholder(scope.topic_tags)}::text[]")
    if filters.language is not None:
        parts.append(f"c.language = {sql.placeholder(filters.language)}")
    if filters.content_types:
        parts.append(f"c.content_type = ANY({sql.placeholder(filters.content_types)}::text[])")
    if filters.document_ids:
        parts.append(f"c.document_id = ANY({sql.placeholder(filters.document_ids)}::uuid[])")
    if filters.curriculum_standards:
        standards = sql.placeholder(list(filters.curriculum_standards))
        condition = f"c.curriculum_standards && {standards}::text[]"
        if filters.include_untagged:
            condition = f"(cardinality(c.curriculum_standards) = 0 OR {condition})"
        parts.append(condition)
    sql.clause = " AND ".join(parts)
    return sql


@dataclass(frozen=True)
class QueryTerm:
    """One lexeme of a query with its tenant statistics."""

    lexeme: str
    term_id: int | None
    df: int


@dataclass(frozen=True)
class TermStats:
    """The query's lexemes and the tenant's collection size."""

    terms: list[QueryTerm]
    chunk_count: int
    total_length: int


#: a language whose documents are rarer than this in a tenant does not stem its questions:
#: a few misdetected documents indexed "simple" would otherwise add every stop word of a
#: question as a rare, heavily weighted term (bioasq-dev sparse nDCG@10 0.81 -> 0.69)
MIN_LANGUAGE_SHARE = 0.1


async def tenant_ts_configs(conn: Queryable, *, tenant_id: str) -> list[str]:
    """The text search configurations most of the tenant's searchable documents were indexed
    with: every one holding at least ``MIN_LANGUAGE_SHARE`` of them (the commonest always)."""
    rows = await conn.fetch(
        """SELECT ts_config::text AS name, count(*) AS n FROM index_documents
           WHERE tenant_id = $1 AND searchable AND ts_config IS NOT NULL
           GROUP BY 1 ORDER BY n DESC, name""",
        tenant_id,
    )
    total = sum(int(r["n"]) for r in rows)
    return sorted(
        str(r["name"])
        for i, r in enumerate(rows)
        if i == 0 or int(r["n"]) >= MIN_LANGUAGE_SHARE * total
    )


async def query_terms(
    conn: Queryable, *, tenant_id: str, ts_configs: Sequence[str], text: str
) -> TermStats:
    """Lexemes of ``text`` under each of ``ts_configs`` (the languages the tenant's chunks
    were stemmed in), with their document frequencies in the tenant."""
    rows = await conn.fetch(
        """SELECT t.lexeme, v.id AS term_id, coalesce(s.df, 0) AS df,
                  coalesce(cs.chunk_count, 0) AS chunk_count,
                  coalesce(cs.total_length, 0) AS total_length
           FROM (SELECT DISTINCT u.lexeme
                 FROM unnest($2::text[]) AS c(name),
                      unnest(to_tsvector(c.name::regconfig, $3)) AS u) t
           LEFT JOIN bm25_vocabulary v ON v.term = t.lexeme
           LEFT JOIN bm25_term_stats s ON s.tenant_id = $1 AND s.term_id = v.id
           LEFT JOIN bm25_collection_stats cs ON cs.tenant_id = $1""",
        tenant_id,
        list(ts_configs),
        text,
    )
    if not rows:
        stats = await conn.fetchrow(
            "SELECT chunk_count, total_length FROM bm25_collection_stats WHERE tenant_id = $1",
            tenant_id,
        )
        count, total = (stats["chunk_count"], stats["total_length"]) if stats else (0, 0)
        return TermStats(terms=[], chunk_count=count, total_length=total)
    return TermStats(
        terms=[QueryTerm(r["lexeme"], r["term_id"], r["df"]) for r in rows],
        chunk_count=rows[0]["chunk_count"],
        total_length=rows[0]["total_length"],
    )


def sparse_query_vector(weights: dict[int, float]) -> SparseVector:
    """The query's sparsevec (term id -> idf) in the dimension of the stored weights."""
    # SparseVector takes 0-based indices; sparsevec text is 1-based, term ids are 1-based
    return SparseVector({term_id - 1: w for term_id, w in weights.items()}, SPARSE_DIM)


async def tenant_chunk_count(conn: Queryable, *, tenant_id: str) -> int:
    """The tenant's indexed chunks (from the BM25 statistics; 0 when it has none)."""
    value = await conn.fetchval(
        "SELECT chunk_count FROM bm25_collection_stats WHERE tenant_id = $1", tenant_id
    )
    return int(value or 0)


async def count_up_to(conn: Queryable, *, where: SqlFilter, limit: int) -> int:
    """How many chunks pass the filter, counting at most ``limit`` + 1."""
    value = await conn.fetchval(
        f"SELECT count(*) FROM (SELECT 1 FROM chunks c WHERE {where.clause} "  # noqa: S608
        f"LIMIT {int(limit) + 1}) x",
        *where.params,
    )
    return int(value)


async def estimated_rows(conn: Connection, *, where: SqlFilter) -> float:
    """How many chunks the planner expects to pass the filter (its statistics, no scan)."""
    async with conn.transaction():
        # a prepared statement's generic plan would estimate without the parameters' values
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        plan = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks c WHERE {where.clause}",  # noqa: S608
            *where.params,
        )
    return float(json.loads(plan)[0]["Plan"]["Plan Rows"])


async def dense_search(
    conn: Connection,
    *,
    where: SqlFilter,
    embedding: np.ndarray[Any, Any],
    k: int,
    exact: bool,
    ef_search: int | None,
    overfetch: int = 2,
    own_indexes: str | None = None,
) -> list[Any]:
    """Top-k chunks by cosine distance (HNSW with iterative scans, or exact).

    ``own_indexes``: the tenant, when it has indexes of its own (``tenant_indexes``).

    k is part of the statement, not a parameter: with ``LIMIT $n`` Postgres costs the
    generic plan as if the limit were large and re-plans the statement on every call
    (~0.2 ms each); with the number in the text, the prepared statement settles on its
    generic plan after five calls, and queries with a different k get their own.
    """
    params = [*where.params, embedding]
    q = f"${len(params)}"
    # exact: an expression the HNSW index cannot serve, so the planner filters then sorts
    order = f"(c.embedding <=> {q}) + 0" if exact else f"c.embedding <=> {q}"
    # the index serves ORDER BY distance alone; ties are broken by id outside it. An
    # iterative scan in relaxed order hands rows over as it meets them past the filter, not
    # strictly nearest first: it is asked for ``overfetch`` times k and the nearest k kept
    # (a tenant of 1-10% of the chunks: recall@20 against exact search 0.93 -> 0.97 at 150,000
    # chunks, `make bench-scale`)
    fetch = int(k) if exact else int(k) * max(1, overfetch)
    clause = where.clause if exact else _naming_tenant(where, own_indexes)
    sql = f"""
        SELECT * FROM (
            SELECT {_HIT_COLUMNS}, 1 - (c.embedding <=> {q}) AS score FROM chunks c
            WHERE {clause} ORDER BY {order} LIMIT {fetch}) hits
        ORDER BY score DESC, chunk_id LIMIT {int(k)}"""  # noqa: S608 - placeholders, ints and a quoted literal
    if ef_search is None:
        return list(await conn.fetch(sql, *params))
    async with conn.transaction():
        await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
        return list(await conn.fetch(sql, *params))


def _naming_tenant(where: SqlFilter, tenant_id: str | None) -> str:
    """``where``'s clause, naming the tenant as a literal when it has indexes of its own:
    the planner proves a partial index's predicate from constants only, and a prepared
    statement settles on a generic plan, whose parameters are no constants."""
    if tenant_id is None:
        return where.clause
    return f"{where.clause} AND c.tenant_id = {tenant_indexes.literal(tenant_id)}"


async def sparse_search(
    conn: Queryable,
    *,
    where: SqlFilter,
    tsqueries: Sequence[str],
    query_vector: SparseVector,
    k: int,
    own_indexes: str | None = None,
) -> list[Any]:
    """Top-k chunks by BM25 among the GIN matches of any of ``tsqueries``, by inner product.

    Each tsquery is its own condition, so Postgres ORs their bitmap index scans; the
    scores are always the query's full BM25 score. ``own_indexes``: the tenant, when it has
    indexes of its own (``tenant_indexes``): its GIN index lists its chunks alone.
    """
    params = list(where.params)
    matches: list[str] = []
    for tsquery in tsqueries:
        params.append(tsquery)
        matches.append(f"c.tsv @@ ${len(params)}::tsquery")
    params.append(query_vector)
    vec = f"${len(params)}"
    sql = f"""
        SELECT {_HIT_COLUMNS}, -(c.bm25 <#> {vec}) AS score FROM chunks c
        WHERE {_naming_tenant(where, own_indexes)} AND ({" OR ".join(matches)})
            AND c.bm25 IS NOT NULL
        ORDER BY c.bm25 <#> {vec}, c.id LIMIT {int(k)}"""  # noqa: S608 - placeholders, an int and a quoted literal
    return list(await conn.fetch(sql, *params))


async def candidate_rows(
    conn: Queryable, *, tenant_id: str, chunk_ids: Sequence[Any]
) -> dict[Any, Any]:
    """The candidate columns of these chunks of the tenant, by chunk id (a chunk whose
    document stopped being searchable since it was found is left out)."""
    rows = await conn.fetch(
        f"""SELECT {_CANDIDATE_COLUMNS}
            FROM chunks c JOIN index_documents d ON d.document_id = c.document_id
            WHERE c.id = ANY($2::uuid[]) AND c.tenant_id = $1 AND c.active""",  # noqa: S608
        tenant_id,
        list(chunk_ids),
    )
    return {row["chunk_id"]: row for row in rows}
