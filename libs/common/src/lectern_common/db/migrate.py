"""Numbered plain-SQL migrations applied once, in order, under an advisory lock."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)

# An arbitrary constant: every migrator in the cluster takes the same lock, so concurrent
# `lectern migrate` Jobs (or an embedded start racing a test) apply each migration once.
MIGRATION_LOCK_ID = 0x1EC7E_4D


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """The packaged migrations, in version order."""
    found: list[Migration] = []
    folder = resources.files("lectern_common.db") / "migrations"
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    return found


async def applied_migrations(conn: asyncpg.Connection) -> list[int]:
    """Versions already applied (empty on a fresh database)."""
    exists = await conn.fetchval("SELECT to_regclass('public.schema_migrations') IS NOT NULL")
    if not exists:
        return []
    rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
    return [r["version"] for r in rows]


async def migrate(dsn: str, *, embedding_model: str, embedding_dim: int) -> list[int]:
    """Apply pending migrations; return the versions applied by this call.

    Idempotent and safe to run concurrently. When the database already indexes embeddings of
    another model, the operator is told to run ``lectern reindex`` (nothing is refused).
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
        try:
            return await _migrate_locked(conn, embedding_model, embedding_dim)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
    finally:
        await conn.close()


async def _migrate_locked(
    conn: asyncpg.Connection, embedding_model: str, embedding_dim: int
) -> list[int]:
    await conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version integer PRIMARY KEY,
               name text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    done = set(await applied_migrations(conn))
    if done:
        recorded = await conn.fetchrow("SELECT name, dimension FROM embedding_models WHERE id = 1")
        if recorded is not None:
            check_embedding_model(
                recorded_name=recorded["name"],
                recorded_dim=recorded["dimension"],
                embedding_model=embedding_model,
                embedding_dim=embedding_dim,
            )
    applied: list[int] = []
    for migration in load_migrations():
        if migration.version in done:
            continue
        # plain replace, not string.Template: plpgsql bodies use $$ quoting
        sql = migration.sql.replace("${embedding_dim}", str(int(embedding_dim)))
        async with conn.transaction():
            await conn.execute(sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            if migration.version == 1:
                await conn.execute(
                    "INSERT INTO embedding_models (id, name, dimension) VALUES (1, $1, $2)",
                    embedding_model,
                    embedding_dim,
                )
        log.info("applied migration %04d_%s", migration.version, migration.name)
        applied.append(migration.version)
    return applied


def check_embedding_model(
    *, recorded_name: str, recorded_dim: int, embedding_model: str, embedding_dim: int
) -> None:
    """Tell the operator when the configured embedder is not the index's model.

    Nothing is refused: the services follow the index's model (``lectern_common.index``), and
    ``lectern reindex`` moves the index to the configured one while retrieval answers.
    """
    if (recorded_name, recorded_dim) == (embedding_model, embedding_dim):
        return
    log.warning(
        "the index holds %d-dimensional embeddings from %r, but the configured embedder is "
        "%r (%d dimensions): the services keep using %r; run `lectern reindex --model %s` to "
        "move the index to the configured model (retrieval keeps answering meanwhile)",
        recorded_dim, recorded_name, embedding_model, embedding_dim, recorded_name,
        embedding_model,
    )  # fmt: skip
