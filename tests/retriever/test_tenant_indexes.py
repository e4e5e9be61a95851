"""A large tenant's own HNSW and GIN indexes: built when it grows, used by its searches,
dropped when it shrinks (``lectern_retriever.tenant_indexes``, migration 0027)."""

from __future__ import annotations

import json
import uuid
from typing import Any, cast

import pytest
from pgvector import SparseVector

from lectern_common.db.types import Connection
from lectern_common.embeddings import Embedder
from lectern_common.events import RetrievalFilters, RetrieveRequest
from lectern_retriever import repository, tenant_indexes
from lectern_retriever.config import Settings
from lectern_retriever.handlers import Retriever

pytestmark = pytest.mark.integration


def test_the_definition_copies_the_shared_index_for_one_tenant() -> None:
    shared = (
        "CREATE INDEX chunks_embedding_hnsw ON public.chunks USING hnsw "
        "(embedding vector_cosine_ops) WITH (m='16', ef_construction='64')"
    )
    names = tenant_indexes.index_names("o'neil")
    name = names["chunks_embedding_hnsw"]
    assert name.startswith("chunks_hnsw_t_") and len(name) <= 63
    assert names["chunks_tsv_gin"].startswith("chunks_gin_t_")
    assert tenant_indexes.definition(shared, name=name, tenant_id="o'neil") == (
        f"CREATE INDEX CONCURRENTLY {name} ON public.chunks USING hnsw "
        "(embedding vector_cosine_ops) WITH (m='16', ef_construction='64') "
        "WHERE (tenant_id = 'o''neil')"
    )
    with pytest.raises(ValueError, match="unexpected"):
        tenant_indexes.definition(shared + " WHERE active", name=name, tenant_id="x")


async def _generic_plan(conn: Any, sql: str, args: list[Any], *, btrees: bool = True) -> str:
    """EXPLAIN of the plan a prepared statement settles on after five calls (generic: its
    parameters are no constants). A small table: sequential scans and sorts are made costly,
    so that the planner picks between the ordered (HNSW) paths; ``btrees=False`` hides the
    tenant's b-tree indexes (dropped in a transaction rolled back), which a small tenant's
    BM25 search prefers to any GIN index."""
    types = [_type(a) for a in args]
    name = f"q_{uuid.uuid4().hex[:8]}"
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute("SET LOCAL enable_seqscan = off")
        if btrees:
            await conn.execute("SET LOCAL enable_sort = off")
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        if not btrees:
            for index in await conn.fetch(
                "SELECT indexrelid::regclass::text AS name FROM pg_index x "
                "JOIN pg_am a ON a.oid = (SELECT relam FROM pg_class WHERE oid = x.indexrelid) "
                "WHERE x.indrelid = 'chunks'::regclass AND a.amname = 'btree' "
                "AND NOT x.indisprimary AND NOT x.indisunique"
            ):
                await conn.execute(f"DROP INDEX {index['name']}")
        await conn.execute(f"PREPARE {name} ({', '.join(types)}) AS {sql}")
        try:
            values = ", ".join(f"{_literal(a)}::{t}" for a, t in zip(args, types, strict=True))
            return str(await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {name} ({values})"))
        finally:
            await conn.execute(f"DEALLOCATE {name}")  # not undone by the rollback
    finally:
        await transaction.rollback()


def _type(value: Any) -> str:
    if isinstance(value, SparseVector):
        return "sparsevec"
    if hasattr(value, "shape"):
        return "vector"
    return "text[]" if isinstance(value, list) else "text"


def _literal(value: Any) -> str:
    if isinstance(value, SparseVector):
        return f"'{value.to_text()}'"
    if hasattr(value, "shape"):
        return "'[" + ",".join(f"{float(x):.6f}" for x in value) + "]'"
    if isinstance(value, list):
        return "ARRAY[" + ",".join(tenant_indexes.literal(str(v)) for v in value) + "]"
    return tenant_indexes.literal(str(value))


class _Capture:
    """Records the statement ``dense_search`` would run."""

    def __init__(self) -> None:
        self.sql = ""
        self.args: list[Any] = []

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        self.sql, self.args = sql, list(args)
        return []


async def test_a_large_tenant_gets_its_own_indexes_and_loses_them_when_it_shrinks(
    db_pool: Any,
    database_url: str,
    nats_url: str,
    embedder: Embedder,
    add_doc: Any,
    unit_vectors: Any,
) -> None:
    big = f"o'neil-{uuid.uuid4().hex[:8]}"  # a quote in the id: the literal must hold it
    small = f"small-{uuid.uuid4().hex[:8]}"
    vectors = unit_vectors(700, seed=11)
    for start in range(0, 600, 200):
        await add_doc(
            db_pool, tenant_id=big, texts=[f"chunk {i}" for i in range(start, start + 200)],
            vectors=vectors[start : start + 200],
        )  # fmt: skip
    await add_doc(
        db_pool, tenant_id=small, texts=[f"chunk {i}" for i in range(100)], vectors=vectors[600:]
    )
    async with db_pool.acquire() as conn:
        todo = await tenant_indexes.plan(conn, min_chunks=600)
    assert (big, 600) in todo.build
    assert small not in {t for t, _ in todo.build}
    async with db_pool.acquire() as conn:
        # a tenant holding most of the chunks keeps the shared indexes
        total = await conn.fetchval("SELECT sum(chunk_count) FROM bm25_collection_stats")
        share = 599 / total
        assert big not in {t for t, _ in (await tenant_indexes.plan(
            conn, min_chunks=600, max_share=share)).build}  # fmt: skip

    settings = Settings(
        nats_url=nats_url, database_url=database_url, http_port=0, exact_search_below=0,
        tenant_index_min_chunks=600, tenant_index_max_share=1.0, tenant_index_interval_s=0,
    )  # fmt: skip
    retriever = Retriever(settings=settings, embedder=embedder)
    await retriever.start()
    built: set[str] = set()
    try:
        done = await retriever.index_tenants()
        built = set(done)
        assert big in built and small not in built
        assert big in await retriever.own_indexes()
        async with db_pool.acquire() as conn:
            # past the cap on tenants with copies, the smallest lose theirs and none is built
            capped = await tenant_indexes.plan(conn, min_chunks=600, max_tenants=0)
            assert big in capped.drop and not capped.build
            assert big not in (await tenant_indexes.plan(conn, min_chunks=600)).drop

        # the tenant's searches are planned on its own index, the others' on the shared one
        query = vectors[5]
        where = repository.build_filter(tenant_id=big, filters=RetrievalFilters())
        own, shared = _Capture(), _Capture()
        for capture, graph in ((own, big), (shared, None)):
            await repository.dense_search(
                cast(Connection, capture), where=where, embedding=query, k=10, exact=False,
                ef_search=None,
                own_indexes=graph,
            )  # fmt: skip
        async with db_pool.acquire() as conn:
            own_plan = await _generic_plan(conn, own.sql, own.args)
            shared_plan = await _generic_plan(conn, shared.sql, shared.args)
        graph = tenant_indexes.index_names(big)["chunks_embedding_hnsw"]
        assert graph in own_plan, _names(own_plan)
        assert graph not in shared_plan

        # so are its BM25 searches: its own GIN index lists its chunks alone
        for capture, graph in ((own, big), (shared, None)):
            await repository.sparse_search(
                cast(Connection, capture), where=where, tsqueries=["417"], k=10, own_indexes=graph,
                query_vector=repository.sparse_query_vector({1: 1.0}),
            )  # fmt: skip
        async with db_pool.acquire() as conn:
            own_plan = await _generic_plan(conn, own.sql, own.args, btrees=False)
            shared_plan = await _generic_plan(conn, shared.sql, shared.args, btrees=False)
        gin = tenant_indexes.index_names(big)["chunks_tsv_gin"]
        assert gin in own_plan, _names(own_plan)
        assert gin not in shared_plan

        # and find what exact search finds (a 600-vector graph at ef_search 200)
        reply = await retriever.retrieve(
            RetrieveRequest(
                tenant_id=big, query="chunk", k=10, k_dense=10, k_sparse=0, methods=["dense"],
                max_per_document=None,
            )
        )  # fmt: skip
        async with db_pool.acquire() as conn:
            exact = await repository.dense_search(
                conn, where=where, embedding=(await embedder.embed_queries(["chunk"]))[0],
                k=10, exact=True, ef_search=None,
            )  # fmt: skip
        assert {c.chunk_id for c in reply.candidates} == {r["chunk_id"] for r in exact}

        # under half the threshold, the index goes
        async with db_pool.acquire() as conn:
            assert big in (await tenant_indexes.plan(conn, min_chunks=1300)).drop
        await tenant_indexes.maintain(database_url, min_chunks=1300, limit=0)
        async with db_pool.acquire() as conn:
            assert big not in await tenant_indexes.ready(conn)
            for name in tenant_indexes.index_names(big).values():
                assert await conn.fetchval("SELECT to_regclass($1)", name) is None
    finally:
        async with db_pool.acquire() as conn:
            for tenant in built:
                await tenant_indexes.drop(conn, tenant)
        await retriever.close()


def _names(plan: str) -> list[str]:
    """The plan's node types and index names (a failure's message)."""
    out: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        out.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
        for child in node.get("Plans", []):
            walk(child)

    walk(json.loads(plan)[0]["Plan"])
    return out
