"""A subject filter is served by an index (migration 0028): the count the retriever makes
before a filtered search (exact or HNSW) reads the matching chunks, not the whole tenant."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lectern_common.events import RetrievalFilters
from lectern_retriever import repository

pytestmark = pytest.mark.integration


async def _plan(conn: Any, where: repository.SqlFilter) -> str:
    """The count's plan with sequential scans made costly (a test table is small)."""
    async with conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        return str(
            await conn.fetchval(
                "EXPLAIN (FORMAT JSON) SELECT count(*) FROM (SELECT 1 FROM chunks c "  # noqa: S608
                f"WHERE {where.clause} LIMIT 2001) x",
                *where.params,
            )
        )


async def test_a_subject_filter_is_counted_on_its_index_with_or_without_untagged_material(
    fresh_pool: Any, add_doc: Any, unit_vectors: Any
) -> None:
    # ANALYZE samples a table as large as the suite's `chunks` at random (a subject filter
    # was once counted on the tenant's generic index there): a database of the test's own
    db_pool = fresh_pool
    tenant = f"subject-{uuid.uuid4().hex[:8]}"
    vectors = unit_vectors(30, seed=5)
    texts = [f"chunk {i}" for i in range(10)]
    await add_doc(
        db_pool, tenant_id=tenant, texts=texts, vectors=vectors[:10], subject="Biology",
        class_id="7b",
    )  # fmt: skip
    await add_doc(db_pool, tenant_id=tenant, texts=texts, vectors=vectors[10:20], subject="Maths")
    await add_doc(db_pool, tenant_id=tenant, texts=texts, vectors=vectors[20:])  # untagged
    strict = repository.build_filter(
        tenant_id=tenant, filters=RetrievalFilters(subject=" biology ")
    )
    untagged = repository.build_filter(
        tenant_id=tenant, filters=RetrievalFilters(subject="BIOLOGY", include_untagged=True)
    )
    classes = repository.build_filter(
        tenant_id=tenant, filters=RetrievalFilters(subject="biology", class_ids=["7a", "7b"])
    )
    async with db_pool.acquire() as conn:
        assert await repository.count_up_to(conn, where=strict, limit=100) == 10
        assert await repository.count_up_to(conn, where=untagged, limit=100) == 20
        assert await repository.count_up_to(conn, where=classes, limit=100) == 10
        await conn.execute("ANALYZE chunks")
        for where in (strict, untagged, classes):
            assert "chunks_tenant_subject" in await _plan(conn, where)
        # what the retriever asks before counting: the planner's statistics, the values in
        assert 1 <= await repository.estimated_rows(conn, where=strict) <= 20
        assert 10 <= await repository.estimated_rows(conn, where=untagged) <= 40
        nothing = repository.build_filter(tenant_id=tenant, filters=RetrievalFilters(subject="x"))
        assert await repository.estimated_rows(conn, where=nothing) <= 2
