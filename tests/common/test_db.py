"""Migrations against a real Postgres with pgvector."""

import asyncio
import importlib
import uuid
from typing import Any

import asyncpg
import pytest
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL

from lectern_common.db import migrate
from lectern_common.db.migrate import load_migrations

pytestmark = pytest.mark.integration


async def test_schema_has_every_table_and_index(db_pool: Any) -> None:
    tables = {
        r["tablename"]
        for r in await db_pool.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
    }
    for table in (
        "documents", "chunks", "chat_sessions", "chat_messages", "user_memories",
        "usage_counters", "feedback_flags", "knowledge_gaps", "embedding_models",
        "schema_migrations",
    ):  # fmt: skip
        assert table in tables
    indexes = {
        r["indexname"]: r["indexdef"]
        for r in await db_pool.fetch("SELECT indexname, indexdef FROM pg_indexes")
    }
    assert "hnsw" in indexes["chunks_embedding_hnsw"]
    assert "vector_cosine_ops" in indexes["chunks_embedding_hnsw"]
    assert "gin" in indexes["chunks_tsv_gin"]
    assert "btree" in indexes["chunks_tenant_filters"]


async def test_dimension_recorded_and_applied_to_vector_columns(db_pool: Any) -> None:
    row = await db_pool.fetchrow("SELECT name, dimension FROM embedding_models")
    assert row["dimension"] == LOCAL_EMBEDDING_DIM
    typmod = await db_pool.fetchval(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
    )
    assert typmod == f"vector({LOCAL_EMBEDDING_DIM})"


async def test_concurrent_migrations_of_a_fresh_database_apply_each_once(
    fresh_database: str,
) -> None:
    versions = [m.version for m in load_migrations()]
    results = await asyncio.gather(
        *[
            migrate(
                fresh_database,
                embedding_model=LOCAL_EMBEDDING_MODEL,
                embedding_dim=LOCAL_EMBEDDING_DIM,
            )
            for _ in range(4)
        ]
    )
    # the first to take the lock applies everything; the others find nothing left to do
    assert sorted(results) == [[], [], [], versions]
    conn = await asyncpg.connect(fresh_database)
    try:
        recorded = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        models = await conn.fetch("SELECT name, dimension FROM embedding_models")
    finally:
        await conn.close()
    assert [r["version"] for r in recorded] == versions
    assert [tuple(r) for r in models] == [(LOCAL_EMBEDDING_MODEL, LOCAL_EMBEDDING_DIM)]
    again = await migrate(
        fresh_database, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=LOCAL_EMBEDDING_DIM
    )
    assert again == []


async def test_another_configured_model_is_reported_with_the_reindex_command(
    database_url: str, db_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # nothing is refused: the services follow the index's model, and the operator is told
    # how to move the index to the configured one
    for other, dim in (
        ("gemini-embedding-001", 768),
        ("sentence-transformers/paraphrase-MiniLM-L6-v2", LOCAL_EMBEDDING_DIM),
    ):
        caplog.clear()
        with caplog.at_level("WARNING", logger="lectern_common.db.migrate"):
            assert await migrate(database_url, embedding_model=other, embedding_dim=dim) == []
        assert f"lectern reindex --model {other}" in caplog.text
        assert LOCAL_EMBEDDING_MODEL in caplog.text
    row = await db_pool.fetchrow("SELECT name, dimension FROM embedding_models")
    assert (row["name"], row["dimension"]) == (LOCAL_EMBEDDING_MODEL, LOCAL_EMBEDDING_DIM)


async def test_every_packaged_migration_applied(db_pool: Any) -> None:
    applied = [r["version"] for r in await db_pool.fetch("SELECT version FROM schema_migrations")]
    assert applied == [m.version for m in load_migrations()]


async def test_vector_roundtrip_and_generated_tsvector(db_pool: Any, tenant_id: str) -> None:
    import numpy as np

    doc_id = uuid.uuid4()
    await db_pool.execute(
        "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
        "file_sha256, uploaded_by) VALUES ($1, $2, 't', 'f.txt', 'text/plain', 1, 'x', 'u')",
        doc_id,
        tenant_id,
    )
    vec = np.random.default_rng(0).random(LOCAL_EMBEDDING_DIM).astype(np.float32)
    await db_pool.execute(
        "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, token_count, "
        "content_hash, embedding) VALUES ($1, $2, $3, 0, 'Mitochondria produce energy', 5, "
        "'h', $4)",
        uuid.uuid4(),
        doc_id,
        tenant_id,
        vec,
    )
    row = await db_pool.fetchrow(
        "SELECT embedding, tsv::text AS tsv FROM chunks WHERE document_id = $1", doc_id
    )
    assert np.allclose(row["embedding"].to_numpy(), vec)
    assert "'mitochondria'" in row["tsv"]
    assert "'energi'" in row["tsv"]


async def test_closing_a_pool_with_a_connection_held_ends_within_its_timeout(
    database_url: str,
) -> None:
    """``Pool.close`` waits for every connection to come back; a handler that outlived the
    graceful stop must not hold the service's shutdown for ever."""
    import time

    from lectern_common.db.pool import close_pool, create_pool

    pool: Any = await create_pool(database_url, min_size=1, max_size=2)  # asyncpg's own API
    held = await pool.acquire()
    began = time.monotonic()
    await close_pool(pool, timeout=0.5)
    assert time.monotonic() - began < 5
    assert pool.is_closing()
    with pytest.raises(asyncpg.InterfaceError):
        await held.fetchval("SELECT 1")  # terminated, not left open
    await asyncio.sleep(0)


async def test_the_upgrade_gives_ingest_its_own_record_of_every_document(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 0038 on a database in use: each document's row is copied into ingest's own
    record (``ingest_documents``) with its processing state, and the chunks no longer hang on
    the gateway's row."""
    module = importlib.import_module("lectern_common.db.migrate")
    every = load_migrations()
    monkeypatch.setattr(module, "load_migrations", lambda: [m for m in every if m.version < 38])
    await migrate(
        fresh_database, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=LOCAL_EMBEDDING_DIM
    )
    document_id = uuid.uuid4()
    conn = await asyncpg.connect(fresh_database)
    try:
        await conn.execute(
            "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
            "file_sha256, uploaded_by, status, chunk_count, content_sha256, simhash, "
            "topic_tags, attempts, object_name, ts_config) VALUES ($1, 't', 'Waves', "
            "'waves.pdf', 'application/pdf', 10, 'x', 'teacher-1', 'indexed', 1, 'c', 42, "
            "'{sound}', 2, 'o', 'english')",
            document_id,
        )
        await conn.execute(
            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, token_count, "
            "content_hash, embedding) VALUES ($1, $2, 't', 0, 'waves', 1, 'h', $3)",
            uuid.uuid4(), document_id, "[" + ",".join(["0.1"] * LOCAL_EMBEDDING_DIM) + "]",
        )  # fmt: skip
    finally:
        await conn.close()

    monkeypatch.setattr(module, "load_migrations", lambda: every)
    applied = await migrate(
        fresh_database, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=LOCAL_EMBEDDING_DIM
    )
    assert 38 in applied
    conn = await asyncpg.connect(fresh_database)
    try:
        record = await conn.fetchrow("SELECT * FROM ingest_documents WHERE id = $1", document_id)
        await conn.execute("DELETE FROM documents WHERE id = $1", document_id)
        chunks = await conn.fetchval(
            "SELECT count(*) FROM chunks WHERE document_id = $1", document_id
        )
    finally:
        await conn.close()
    assert record is not None
    assert (record["status"], record["title"], record["chunk_count"], record["simhash"]) == (
        "indexed", "Waves", 1, 42)  # fmt: skip
    assert (record["topic_tags"], record["attempts"], record["object_name"]) == (["sound"], 2, "o")
    assert record["uploaded"] and record["revision"] == 0
    assert chunks == 1, "ingest's chunks do not go with the gateway's row"
