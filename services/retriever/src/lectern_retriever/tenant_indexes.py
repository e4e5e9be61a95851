"""A large tenant's own HNSW graph: a partial index of ``chunks.embedding`` for its rows.

Under a tenant filter, one shared graph makes a search walk other tenants' chunks: an
iterative scan for an 11% tenant of a million chunks visits about nine foreign chunks for
each of its own (p95 118 ms, `make bench-scale`), and the graph's neighbour lists serve every
tenant at once. A tenant that holds ``min_chunks`` chunks or more gets a partial index
``WHERE tenant_id = '<tenant>'`` with the shared index's parameters (migration 0027), built
``CONCURRENTLY`` (writes go on) by one retriever replica at a time. A tenant that falls
below half the threshold loses it. Dense searches of a tenant with its own index name the
tenant as a literal (``repository.dense_search``): the planner proves a partial index's
predicate only from constants, never from a statement's parameters.

The cost: the tenant's vectors are indexed twice (its graph and the shared one), about
2 KB a chunk at 384 dimensions, and its inserts update both graphs.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

#: the shared graph whose parameters (operator class, m, ef_construction) each copy takes
SHARED_INDEX = "chunks_embedding_hnsw"
PREFIX = "chunks_embedding_hnsw_t_"
#: one builder in the cluster (session-level advisory lock)
BUILD_LOCK_ID = 0x1EC7_7E1D


def index_name(tenant_id: str) -> str:
    """The tenant's index name: stable, short and safe whatever the tenant id holds."""
    return PREFIX + hashlib.sha256(tenant_id.encode()).hexdigest()[:24]


def literal(tenant_id: str) -> str:
    """``tenant_id`` as an SQL string literal (standard_conforming_strings, the default since
    PostgreSQL 9.1: only the quote is special)."""
    if "\x00" in tenant_id:
        raise ValueError("a tenant id cannot hold NUL")
    return "'" + tenant_id.replace("'", "''") + "'"


def definition(shared: str, *, name: str, tenant_id: str) -> str:
    """The shared index's definition (``pg_get_indexdef``) for one tenant's rows."""
    statement, found = re.subn(
        r"^CREATE INDEX \S+ ON ", f"CREATE INDEX CONCURRENTLY {name} ON ", shared
    )
    if found != 1 or " WHERE " in statement:
        raise ValueError(f"unexpected definition of {SHARED_INDEX}: {shared}")
    return f"{statement} WHERE (tenant_id = {literal(tenant_id)})"


async def ready(conn: Any) -> set[str]:
    """Tenants whose own index exists and is valid (a replica sees the primary's)."""
    rows = await conn.fetch(
        """SELECT t.tenant_id FROM tenant_vector_indexes t
           JOIN pg_class c ON c.relname = t.index_name AND c.relkind = 'i'
           JOIN pg_index x ON x.indexrelid = c.oid
           WHERE x.indisvalid"""
    )
    return {str(r["tenant_id"]) for r in rows}


@dataclass(frozen=True)
class Plan:
    """What maintenance should do: tenants to index (largest first) and to drop."""

    build: list[tuple[str, int]]
    drop: list[str]


async def plan(conn: Any, *, min_chunks: int) -> Plan:
    """Tenants at or over ``min_chunks`` without their index; tenants under half of it with
    one (the BM25 statistics carry each tenant's live chunk count)."""
    have = await ready(conn)
    rows = await conn.fetch(
        "SELECT tenant_id, chunk_count FROM bm25_collection_stats "
        "WHERE chunk_count >= $1 ORDER BY chunk_count DESC, tenant_id",
        min_chunks,
    )
    build = [(str(r["tenant_id"]), int(r["chunk_count"])) for r in rows
             if str(r["tenant_id"]) not in have]  # fmt: skip
    registered = await conn.fetch(
        "SELECT t.tenant_id, coalesce(s.chunk_count, 0) AS chunks FROM tenant_vector_indexes t "
        "LEFT JOIN bm25_collection_stats s ON s.tenant_id = t.tenant_id"
    )
    drop = [str(r["tenant_id"]) for r in registered if int(r["chunks"]) < min_chunks // 2]
    return Plan(build=build, drop=drop)


async def build(conn: Any, tenant_id: str, *, chunks: int, memory: str | None = None) -> float:
    """Build ``tenant_id``'s index without blocking writes; returns the build's seconds.

    ``conn`` must not be in a transaction (``CREATE INDEX CONCURRENTLY``) and should have no
    statement timeout. A build that failed before leaves an invalid index: it is dropped
    first. ``memory``: ``maintenance_work_mem`` for the build (the graph is built fastest
    when it fits)."""
    name = index_name(tenant_id)
    shared = await conn.fetchval("SELECT pg_get_indexdef(to_regclass($1))", SHARED_INDEX)
    if shared is None:
        raise RuntimeError(f"{SHARED_INDEX} is missing: run `lectern migrate`")
    await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    if memory:
        await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)
    started = time.perf_counter()
    await conn.execute(definition(shared, name=name, tenant_id=tenant_id))
    seconds = time.perf_counter() - started
    await conn.execute(
        """INSERT INTO tenant_vector_indexes (tenant_id, index_name, chunks, build_ms)
           VALUES ($1, $2, $3, $4)
           ON CONFLICT (tenant_id) DO UPDATE SET index_name = EXCLUDED.index_name,
               chunks = EXCLUDED.chunks, build_ms = EXCLUDED.build_ms, created_at = now()""",
        tenant_id, name, chunks, seconds * 1000.0,
    )  # fmt: skip
    return seconds


async def drop(conn: Any, tenant_id: str) -> None:
    """Drop ``tenant_id``'s index (its searches go back to the shared graph)."""
    await conn.execute("DELETE FROM tenant_vector_indexes WHERE tenant_id = $1", tenant_id)
    await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index_name(tenant_id)}")


async def maintain(
    dsn: str,
    *,
    min_chunks: int,
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
            todo = await plan(conn, min_chunks=min_chunks)
            for tenant_id in todo.drop:
                log.info("dropping the HNSW index of tenant %s (below %d chunks)",
                         tenant_id, min_chunks // 2)  # fmt: skip
                await drop(conn, tenant_id)
            builds: Iterable[tuple[str, int]] = todo.build if limit is None else todo.build[:limit]
            for tenant_id, chunks in builds:
                log.info("building the HNSW index of tenant %s (%d chunks)", tenant_id, chunks)
                done[tenant_id] = await build(conn, tenant_id, chunks=chunks, memory=memory)
                log.info("built the HNSW index of tenant %s in %.1f s", tenant_id,
                         done[tenant_id])  # fmt: skip
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", BUILD_LOCK_ID)
    finally:
        await conn.close()
    return done
