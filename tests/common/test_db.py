"""Migrations against a real Postgres with pgvector."""

import asyncio
import uuid
from typing import Any

import pytest

from lectern_common.db import migrate
from lectern_common.db.migrate import load_migrations
from lectern_common.errors import EmbeddingDimensionMismatch
from lectern_common.testing import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL

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


async def test_migrate_is_idempotent_and_concurrency_safe(database_url: str) -> None:
    results = await asyncio.gather(
        *[
            migrate(database_url, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=384)
            for _ in range(4)
        ]
    )
    assert results == [[], [], [], []]


async def test_other_dimension_is_refused(database_url: str) -> None:
    with pytest.raises(EmbeddingDimensionMismatch, match="re-index"):
        await migrate(database_url, embedding_model="gemini-embedding-001", embedding_dim=768)


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
