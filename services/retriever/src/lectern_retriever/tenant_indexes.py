"""A tenant's own indexes: partial copies of ``chunks``' HNSW and GIN indexes for its rows.

Under a tenant filter the shared indexes serve every tenant at once. Dense search walks a graph
mostly made of other tenants' chunks: an iterative scan for an 11% tenant of a million chunks
visits about nine foreign chunks for each of its own (p95 118 ms, `make bench-scale`), and for
a tenant of a few thousand chunks it stops before it has found the nearest (recall 0.88).
BM25's GIN matches list every tenant's chunks holding a term, and each is fetched from the
heap before the tenant filter drops it. A tenant too large for exact search (``min_chunks``,
2,000 by default, the retriever's ``exact_search_below``) gets both indexes for its rows
alone (``WHERE tenant_id = '<tenant>'``, the shared indexes' parameters; migration 0027),
built ``CONCURRENTLY`` (writes go on) by one retriever replica at a time, unless it holds
most of the chunks (the shared indexes are then mostly its own); at most ``max_tenants``
tenants, the largest (each index adds ~1.7 µs to planning a search on ``chunks``: 0.3 ms at
200 copies). A tenant that falls below half the threshold loses them. The searches of a tenant
with its own indexes name the tenant as a literal (``repository.dense_search`` and
``sparse_search``): the planner proves a partial index's predicate from constants only, never
from a prepared statement's parameters.

The cost: the tenant's vectors are indexed twice (its graph and the shared one), about
2 KB a chunk at 384 dimensions, and its inserts update both graphs (the GIN copy is small).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import asyncpg

from lectern_common.db.types import Connection

log = logging.getLogger(__name__)

#: the shared indexes each tenant copy takes its definition from, and the copies' prefixes
SHARED_INDEXES = {"chunks_embedding_hnsw": "chunks_hnsw_t_", "chunks_tsv_gin": "chunks_gin_t_"}
#: one builder in the cluster (session-level advisory lock)
BUILD_LOCK_ID = 0x1EC7_7E1D


def index_names(tenant_id: str) -> dict[str, str]:
    """The tenant's index names by the shared index they copy: stable, short and safe
    whatever the tenant id holds."""
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:24]
    return {shared: prefix + digest for shared, prefix in SHARED_INDEXES.items()}


def literal(tenant_id: str) -> str:
    """``tenant_id`` as an SQL string literal (standard_conforming_strings, the default since
    PostgreSQL 9.1: only the quote is special)."""
    if "\x00" in tenant_id:
        raise ValueError("a tenant id cannot hold NUL")
    return "'" + tenant_id.replace("'", "''") + "'"


def definition(shared: str, *, name: str, tenant_id: str) -> str:
    """A shared index's definition (``pg_get_indexdef``) for one tenant's rows."""
    statement, found = re.subn(
        r"^CREATE INDEX \S+ ON ", f"CREATE INDEX CONCURRENTLY {name} ON ", shared
    )
    if found != 1 or " WHERE " in statement:
        raise ValueError(f"unexpected definition of a shared index: {shared}")
    return f"{statement} WHERE (tenant_id = {literal(tenant_id)})"


async def ready(conn: Connection) -> set[str]:
    """Tenants whose own indexes all exist and are valid (a replica sees the primary's)."""
    rows = await conn.fetch(
        """SELECT t.tenant_id FROM tenant_indexes t
           WHERE NOT EXISTS (
               SELECT 1 FROM unnest(t.index_names) AS n(name)
               LEFT JOIN pg_class c ON c.relname = n.name AND c.relkind = 'i'
               LEFT JOIN pg_index x ON x.indexrelid = c.oid
               WHERE x.indisvalid IS NOT TRUE)"""
    )
    return {str(r["tenant_id"]) for r in rows}


@dataclass(frozen=True)
class Plan:
    """What maintenance should do: tenants to index (largest first) and to drop."""

    build: list[tuple[str, int]]
    drop: list[str]


async def plan(
    conn: Connection, *, min_chunks: int, max_share: float = 1.0, max_tenants: int | None = None
) -> Plan:
    """Tenants at or over ``min_chunks`` without their indexes, unless they hold more than
    ``max_share`` of all chunks (the shared indexes are then mostly theirs: a copy would
    double the graph for little), and only the ``max_tenants`` largest of those (the planner
    weighs every index of ``chunks`` when it plans a search); tenants under half of
    ``min_chunks``, or no longer among the ``max_tenants`` largest, with them. The BM25
    statistics carry each tenant's live chunk count."""
    have = await ready(conn)
    rows = await conn.fetch(
        """SELECT tenant_id, chunk_count FROM bm25_collection_stats
           WHERE chunk_count >= $1
             AND chunk_count <= $2 * (SELECT sum(chunk_count) FROM bm25_collection_stats)
           ORDER BY chunk_count DESC, tenant_id""",
        min_chunks, max_share,
    )  # fmt: skip
    eligible = [(str(r["tenant_id"]), int(r["chunk_count"])) for r in rows]
    chosen = eligible[:max_tenants]
    capped = len(chosen) < len(eligible)
    build = [(t, n) for t, n in chosen if t not in have]
    names = {t for t, _ in chosen}
    registered = await conn.fetch(
        "SELECT t.tenant_id, coalesce(s.chunk_count, 0) AS chunks FROM tenant_indexes t "
        "LEFT JOIN bm25_collection_stats s ON s.tenant_id = t.tenant_id"
    )
    drop = [
        str(r["tenant_id"]) for r in registered
        if int(r["chunks"]) < min_chunks // 2 or (capped and str(r["tenant_id"]) not in names)
    ]  # fmt: skip
    return Plan(build=build, drop=drop)


async def build(
    conn: Connection, tenant_id: str, *, chunks: int, memory: str | None = None
) -> float:
    """Build ``tenant_id``'s indexes without blocking writes; returns the build's seconds.

    ``conn`` must not be in a transaction (``CREATE INDEX CONCURRENTLY``) and should have no
    statement timeout. A build that failed before leaves an invalid index: it is dropped
    first. ``memory``: ``maintenance_work_mem`` for the build (a graph is built fastest when
    it fits)."""
    names = index_names(tenant_id)
    if memory:
        await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)
    started = time.perf_counter()
    for shared, name in names.items():
        definition_of = await conn.fetchval("SELECT pg_get_indexdef(to_regclass($1))", shared)
        if definition_of is None:
            raise RuntimeError(f"{shared} is missing: run `lectern migrate`")
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        await conn.execute(definition(definition_of, name=name, tenant_id=tenant_id))
    seconds = time.perf_counter() - started
    await conn.execute(
        """INSERT INTO tenant_indexes (tenant_id, index_names, chunks, build_ms)
           VALUES ($1, $2, $3, $4)
           ON CONFLICT (tenant_id) DO UPDATE SET index_names = EXCLUDED.index_names,
               chunks = EXCLUDED.chunks, build_ms = EXCLUDED.build_ms, created_at = now()""",
        tenant_id, list(names.values()), chunks, seconds * 1000.0,
    )  # fmt: skip
    return seconds


async def drop(conn: Connection, tenant_id: str) -> None:
    """Drop ``tenant_id``'s indexes (its searches go back to the shared ones)."""
    await conn.execute("DELETE FROM tenant_indexes WHERE tenant_id = $1", tenant_id)
    for name in index_names(tenant_id).values():
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


async def maintain(
    dsn: str,
    *,
    min_chunks: int,
    max_share: float = 1.0,
    max_tenants: int | None = None,
    memory: str | None = None,
    limit: int | None = None,
    connect_timeout_s: float = 10.0,
) -> dict[str, float]:
    """Build the indexes that are due (largest tenant first, at most ``limit``) and drop
    those no longer needed, on a connection of its own without a statement timeout, unless
    another replica is doing it. Returns each built tenant's build seconds."""
    done: dict[str, float] = {}
    conn = await asyncpg.connect(dsn, timeout=connect_timeout_s)
    try:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", BUILD_LOCK_ID):
            return done
        try:
            todo = await plan(
                conn, min_chunks=min_chunks, max_share=max_share, max_tenants=max_tenants
            )
            for tenant_id in todo.drop:
                log.info("dropping the indexes of tenant %s (below %d chunks, or past the "
                         "cap of %s tenants)", tenant_id, min_chunks // 2, max_tenants)  # fmt: skip
                await drop(conn, tenant_id)
            builds: Iterable[tuple[str, int]] = todo.build if limit is None else todo.build[:limit]
            for tenant_id, chunks in builds:
                log.info("building the indexes of tenant %s (%d chunks)", tenant_id, chunks)
                done[tenant_id] = await build(conn, tenant_id, chunks=chunks, memory=memory)
                log.info("built the indexes of tenant %s in %.1f s", tenant_id,
                         done[tenant_id])  # fmt: skip
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", BUILD_LOCK_ID)
    finally:
        await conn.close()
    return done
