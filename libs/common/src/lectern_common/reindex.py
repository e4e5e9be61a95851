"""Re-index: move every stored vector to another embedding model while retrieval answers.

The new index is built beside the live one: an ``embedding_next`` column of the new model's
dimension on each table that holds vectors, backfilled from the stored text in batches, with
copies of the live column's HNSW indexes built ``CONCURRENTLY``. A trigger clears a row's new
vector when its live one is rewritten meanwhile (a memory strengthened, a standard re-uploaded),
and new rows arrive without one; both are filled again before the switch.

The switch is one transaction: it takes the switch lock (waiting for every guarded
transaction in flight: see ``lectern_common.index``), updates ``embedding_models``, locks the
tables, fills what is still
missing, drops the old column and renames the new one into its place with its indexes. Until
that commit nothing retrieval reads has changed, and any failure before it drops the new
columns and leaves the live index as it was. Runs are recorded in ``index_builds``.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lectern_common.db.types import Connection
from lectern_common.embeddings import Embedder
from lectern_common.errors import LecternError
from lectern_common.index import SWITCH_LOCK_ID, IndexModel, live_model
from lectern_common.text import embedding_text

log = logging.getLogger(__name__)

#: one re-index at a time in the cluster
REINDEX_LOCK_ID = 0x1EC7E_1D
NEXT = "embedding_next"
_TRIGGER = "lectern_reindex_reset"


@dataclass(frozen=True)
class VectorTable:
    """A table whose ``embedding`` column holds vectors of the index's model."""

    table: str
    #: ``vector`` or ``halfvec``
    kind: str
    #: rows without a new vector: key columns then what the text is built from
    pending_sql: str
    key_columns: tuple[str, ...]
    text_of: Callable[[Any], str]


def _chunk_text(row: Any) -> str:
    return embedding_text(row["text"], row["context_prefix"], row["title"])


TABLES: tuple[VectorTable, ...] = (
    VectorTable(
        "chunks", "vector",
        "SELECT c.id, c.text, c.context_prefix, d.title FROM chunks c "
        "LEFT JOIN ingest_documents d ON d.id = c.document_id WHERE c.embedding_next IS NULL "
        "LIMIT $1",
        ("id",), _chunk_text,
    ),
    VectorTable(
        "user_memories", "halfvec",
        "SELECT id, text FROM user_memories WHERE embedding_next IS NULL LIMIT $1",
        ("id",), lambda row: str(row["text"]),
    ),
    VectorTable(
        "curriculum_standards", "vector",
        "SELECT tenant_id, code, description FROM curriculum_standards "
        "WHERE embedding_next IS NULL LIMIT $1",
        ("tenant_id", "code"), lambda row: f"{row['code']}: {row['description']}",
    ),
)  # fmt: skip


class ReindexError(LecternError):
    """Raised when a re-index cannot start or fails (the live index is left as it was)."""

    reason = "reindex_failed"


@dataclass
class ReindexReport:
    """What a re-index did."""

    build_id: uuid.UUID
    previous: IndexModel
    model: IndexModel
    rows: dict[str, int] = field(default_factory=dict)
    #: rows embedded inside the switch (written while the backfill ran)
    caught_up: int = 0
    seconds: float = 0.0
    switch_ms: float = 0.0


Progress = Callable[[str, int, int], None]


async def reindex(
    dsn: str,
    embedder: Embedder,
    *,
    batch_size: int = 512,
    progress: Progress | None = None,
    lock_timeout_s: float = 10.0,
    switch_attempts: int = 5,
) -> ReindexReport:
    """Build an index of ``embedder``'s vectors beside the live one and switch to it.

    ``batch_size`` rows are read and embedded at a time: a local model sorts them by length
    and pads each of its own batches only to its longest, so larger reads waste less.

    Raises ``ReindexError`` when another re-index runs, when the index already holds this
    model's vectors, or when the build fails (after dropping what it built).
    """
    started = time.monotonic()
    conn: asyncpg.Connection = await asyncpg.connect(dsn)
    try:
        from pgvector.asyncpg import register_vector

        await register_vector(conn)
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", REINDEX_LOCK_ID):
            raise ReindexError("another re-index is running")
        try:
            report = await _start_build(conn, embedder)
            build_id = report.build_id
            try:
                await _build_and_switch(
                    conn, embedder, report, batch_size=batch_size, progress=progress,
                    lock_timeout_s=lock_timeout_s, switch_attempts=switch_attempts,
                )  # fmt: skip
            except BaseException as exc:
                await _abandon(conn, build_id, exc)
                if isinstance(exc, ReindexError):
                    raise
                if isinstance(exc, Exception):
                    raise ReindexError(f"the re-index failed and was undone: {exc}") from exc
                raise
            report.seconds = time.monotonic() - started
            await conn.execute(
                "UPDATE index_builds SET status = 'switched', finished_at = now(), "
                "switch_ms = $2 WHERE id = $1",
                build_id, report.switch_ms,
            )  # fmt: skip
            return report
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", REINDEX_LOCK_ID)
    finally:
        await conn.close()


async def _start_build(conn: Connection, embedder: Embedder) -> ReindexReport:
    """Record a build of ``embedder``'s index (an interrupted one marked failed); its report.

    Raises ``ReindexError`` without a schema, or when the index holds this model already."""
    previous = await live_model(conn)
    if previous is None:
        raise ReindexError("the database has no schema yet: run `lectern migrate`")
    target = IndexModel(embedder.name, embedder.dimension)
    if target == previous:
        raise ReindexError(
            f"the index already holds {target.name!r} vectors ({target.dimension} dimensions)"
        )
    # a run that holds no lock any more was interrupted (killed, lost its connection)
    await conn.execute(
        "UPDATE index_builds SET status = 'failed', finished_at = now(), "
        "error = 'interrupted: the re-index stopped before it finished' "
        "WHERE status = 'building'"
    )
    build_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO index_builds (id, model, dimension, previous_model, status) "
        "VALUES ($1, $2, $3, $4, 'building')",
        build_id, target.name, target.dimension, previous.name,
    )  # fmt: skip
    return ReindexReport(build_id=build_id, previous=previous, model=target)


async def _build_and_switch(
    conn: Connection,
    embedder: Embedder,
    report: ReindexReport,
    *,
    batch_size: int,
    progress: Progress | None,
    lock_timeout_s: float,
    switch_attempts: int,
) -> None:
    """Fill the next vector columns, index them, catch up and switch to them."""
    build_id = report.build_id
    await _drop_next(conn)  # what an interrupted run left
    await _add_next(conn, report.model.dimension)
    for table in TABLES:
        report.rows[table.table] = await _backfill(
            conn, table, embedder, batch_size=batch_size, progress=progress,
            build_id=build_id,
        )  # fmt: skip
    await _build_indexes(conn)
    for table in TABLES:  # what arrived during the index build
        report.rows[table.table] += await _backfill(
            conn, table, embedder, batch_size=batch_size, progress=None,
            build_id=build_id,
        )  # fmt: skip
    await _switch(
        conn, embedder, report.model, report,
        lock_timeout_s=lock_timeout_s, attempts=switch_attempts,
    )  # fmt: skip


async def _add_next(conn: Connection, dimension: int) -> None:
    await conn.execute(
        f"""CREATE OR REPLACE FUNCTION {_TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN NEW.{NEXT} := NULL; RETURN NEW; END $$"""
    )
    for table in TABLES:
        await conn.execute(
            f"ALTER TABLE {table.table} ADD COLUMN {NEXT} {table.kind}({int(dimension)})"
        )
        await conn.execute(
            f"CREATE TRIGGER {_TRIGGER} BEFORE UPDATE OF embedding ON {table.table} "
            f"FOR EACH ROW WHEN (OLD.embedding IS DISTINCT FROM NEW.embedding) "
            f"EXECUTE FUNCTION {_TRIGGER}()"
        )


async def _drop_next(conn: Connection) -> None:
    for table in TABLES:
        await conn.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON {table.table}")
        await conn.execute(f"ALTER TABLE {table.table} DROP COLUMN IF EXISTS {NEXT}")
    await conn.execute(f"DROP FUNCTION IF EXISTS {_TRIGGER}()")


async def _abandon(conn: Connection, build_id: uuid.UUID, exc: BaseException) -> None:
    log.error("re-index %s failed (%r); dropping the new index", build_id, exc)
    try:
        if conn.is_in_transaction():
            await conn.execute("ROLLBACK")
        await _drop_next(conn)
        await conn.execute(
            "UPDATE index_builds SET status = 'failed', finished_at = now(), error = $2 "
            "WHERE id = $1",
            build_id, repr(exc)[:2000],
        )  # fmt: skip
    except Exception:
        log.exception("could not clean up after the failed re-index %s", build_id)


async def _backfill(
    conn: Connection,
    table: VectorTable,
    embedder: Embedder,
    *,
    batch_size: int,
    progress: Progress | None,
    build_id: uuid.UUID,
) -> int:
    """Embed every row of ``table`` without a new vector; returns how many."""
    pending = f"SELECT count(*) FROM {table.table} WHERE {NEXT} IS NULL"  # noqa: S608 - constants
    total = int(await conn.fetchval(pending))
    done = 0
    while True:
        rows = await conn.fetch(table.pending_sql, batch_size)
        if not rows:
            break
        vectors = await embedder.embed_documents([table.text_of(r) for r in rows])
        await _write(conn, table, rows, vectors)
        done += len(rows)
        await conn.execute(
            "UPDATE index_builds SET done = done + $2, total = greatest(total, done + $2) "
            "WHERE id = $1",
            build_id, len(rows),
        )  # fmt: skip
        if progress is not None:
            progress(table.table, done, max(total, done))
    return done


async def _write(conn: Connection, table: VectorTable, rows: Sequence[Any], vectors: Any) -> None:
    keys = " AND ".join(f"{c} = ${i + 2}" for i, c in enumerate(table.key_columns))
    cast = "::vector::halfvec" if table.kind == "halfvec" else ""
    await conn.executemany(
        f"UPDATE {table.table} SET {NEXT} = $1{cast} WHERE {keys}",  # noqa: S608 - constants
        [(v, *(r[c] for c in table.key_columns)) for r, v in zip(rows, vectors, strict=True)],
    )


async def _live_indexes(conn: Connection, table: str, column: str) -> list[tuple[str, str]]:
    """(name, definition) of the indexes on ``table``'s ``column`` alone."""
    rows = await conn.fetch(
        "SELECT i.relname AS name, pg_get_indexdef(x.indexrelid) AS def "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey) "
        "WHERE x.indrelid = $1::regclass AND a.attname = $2 AND x.indnatts = 1",
        table, column,
    )  # fmt: skip
    return [(r["name"], r["def"]) for r in rows]


def _next_name(name: str) -> str:
    return f"{name[:50]}_next"


async def _build_indexes(conn: Connection) -> None:
    """Copies of the live column's indexes on the new one, built without blocking writes."""
    for table in TABLES:
        for name, definition in await _live_indexes(conn, table.table, "embedding"):
            copy = re.sub(r"^CREATE INDEX \S+ ", f"CREATE INDEX CONCURRENTLY {_next_name(name)} ",
                          definition)  # fmt: skip
            copy = re.sub(r"\(embedding\b", f"({NEXT}", copy)
            log.info("building %s", copy)
            await conn.execute(copy)


async def _switch(
    conn: Connection,
    embedder: Embedder,
    target: IndexModel,
    report: ReindexReport,
    *,
    lock_timeout_s: float,
    attempts: int,
) -> None:
    for attempt in range(1, attempts + 1):
        began = time.monotonic()
        try:
            async with conn.transaction():
                await _switch_locked(conn, embedder, target, report, lock_timeout_s)
        except asyncpg.LockNotAvailableError:
            log.warning("switch attempt %d could not take its locks in time", attempt)
            if attempt == attempts:
                raise ReindexError(
                    f"could not take the switch's locks in {attempts} attempts of "
                    f"{lock_timeout_s:.0f} s; a long transaction holds the tables"
                ) from None
            continue
        report.switch_ms = (time.monotonic() - began) * 1000.0
        return


async def _switch_locked(
    conn: Connection,
    embedder: Embedder,
    target: IndexModel,
    report: ReindexReport,
    lock_timeout_s: float,
) -> None:
    await conn.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
    # the switch lock first: guarded transactions take it (shared) before any table, so they
    # either finish before this or wait for the commit without holding the tables
    await conn.execute("SELECT pg_advisory_xact_lock($1)", SWITCH_LOCK_ID)
    await conn.execute(
        "UPDATE embedding_models SET name = $1, dimension = $2, created_at = now() WHERE id = 1",
        target.name, target.dimension,
    )  # fmt: skip
    names = ", ".join(t.table for t in TABLES)
    await conn.execute(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE")
    report.caught_up = 0
    for table in TABLES:
        while rows := await conn.fetch(table.pending_sql, 256):
            vectors = await embedder.embed_documents([table.text_of(r) for r in rows])
            await _write(conn, table, rows, vectors)
            report.caught_up += len(rows)
    for table in TABLES:
        live = await _live_indexes(conn, table.table, "embedding")
        await conn.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON {table.table}")
        await conn.execute(f"ALTER TABLE {table.table} ALTER COLUMN {NEXT} SET NOT NULL")
        await conn.execute(f"ALTER TABLE {table.table} DROP COLUMN embedding")
        await conn.execute(f"ALTER TABLE {table.table} RENAME COLUMN {NEXT} TO embedding")
        for name, _ in live:
            await conn.execute(f"ALTER INDEX IF EXISTS {_next_name(name)} RENAME TO {name}")
    await conn.execute(f"DROP FUNCTION IF EXISTS {_TRIGGER}()")


async def builds(conn: Connection, *, limit: int = 20) -> list[Any]:
    """The latest re-index runs, newest first."""
    return list(
        await conn.fetch(
            "SELECT id, model, dimension, previous_model, status, done, total, switch_ms, "
            "started_at, finished_at, error FROM index_builds ORDER BY started_at DESC LIMIT $1",
            limit,
        )
    )
