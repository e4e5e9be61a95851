"""Retriever test fixtures: the real local embedder and an in-process Retriever."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import numpy as np
import pytest

from lectern_common.embeddings import Embedder, LocalEmbedder
from lectern_retriever.config import Settings
from lectern_retriever.handlers import Retriever


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The packaged MiniLM, loaded once."""
    return LocalEmbedder(torch_threads=1)


@pytest.fixture(scope="session")
async def retriever(nats_url: str, database_url: str, embedder: Embedder) -> AsyncIterator[Any]:
    """An in-process Retriever on the session's Postgres (no broker)."""
    settings = Settings(nats_url=nats_url, database_url=database_url, http_port=0)
    instance = Retriever(settings=settings, embedder=embedder)
    await instance.start()
    yield instance
    await instance.close()


async def add_document(
    pool: Any,
    *,
    tenant_id: str,
    texts: Sequence[str],
    embedder: Embedder | None = None,
    vectors: np.ndarray[Any, Any] | None = None,
    status: str = "indexed",
    title: str = "doc",
    ts_config: str | None = None,
    **columns: Any,
) -> uuid.UUID:
    """Insert a document and its chunks and index them for BM25, in one transaction.

    The document is created ``pending`` and then moved to ``status``, its chunks settled to
    it by ingest's own code, so whether they are searchable is decided as in production.
    """
    document_id = uuid.uuid4()
    if vectors is None:
        assert embedder is not None
        vectors = await embedder.embed_documents(list(texts))
    names = sorted(columns)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            """INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes,
                   file_sha256, uploaded_by, status)
               VALUES ($1, $2, $3, 'f.txt', 'text/plain', 1, 'x', 'tests', 'pending')""",
            document_id,
            tenant_id,
            title,
        )
        # ingest's own record of the upload, which it indexes from
        await conn.execute(
            """INSERT INTO ingest_documents (id, tenant_id, title, filename, mime_type,
                   uploaded_by, status)
               VALUES ($1, $2, $3, 'f.txt', 'text/plain', 'tests', 'pending')""",
            document_id,
            tenant_id,
            title,
        )
        for index, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            extra_columns = "".join(f", {n}" for n in names)
            placeholders = "".join(f", ${i}" for i in range(9, 9 + len(names)))
            await conn.execute(
                f"""INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text,
                        token_count, embedding, content_hash{extra_columns})
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8{placeholders})""",  # noqa: S608
                uuid.uuid4(),
                document_id,
                tenant_id,
                index,
                text,
                len(text.split()),
                np.asarray(vector, dtype=np.float32),
                digest(text),
                *[columns[n] for n in names],
            )
        if ts_config is not None:  # the language the chunks are stemmed in (default English)
            for table, key in (
                ("chunks", "document_id"),
                ("documents", "id"),
                ("ingest_documents", "id"),
            ):
                await conn.execute(
                    f"UPDATE {table} SET ts_config = $2::text::regconfig WHERE {key} = $1",  # noqa: S608
                    document_id,
                    ts_config,
                )
        await conn.execute("SELECT lectern_bm25_index_document($1)", document_id)
        await set_status(conn, document_id, status)
    return document_id


async def set_status(conn: Any, document_id: uuid.UUID, status: str) -> None:
    """The document's new status, and its chunks brought to it as ingest does when it applies
    the change's event (``lectern_ingest.lifecycle``: ingest owns the chunks)."""
    from lectern_ingest.lifecycle import settle_status

    for table in ("documents", "ingest_documents"):
        await conn.execute(
            f"UPDATE {table} SET status = $2 WHERE id = $1",  # noqa: S608
            document_id,
            status,
        )
    await settle_status(conn, document_id)


def random_unit_vectors(count: int, *, seed: int, dim: int = 384) -> np.ndarray[Any, Any]:
    """Normalised random vectors (synthetic corpora)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    normalised: np.ndarray[Any, Any] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normalised


def digest(text: str) -> str:
    """A content hash."""
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def set_doc_status() -> Callable[..., Any]:
    """``await set_doc_status(pool_or_conn, document_id, status)``, as ingest settles it."""
    return set_status


@pytest.fixture
def add_doc() -> Callable[..., Any]:
    """``await add_doc(pool, tenant_id=, texts=, embedder= | vectors=, status=, **columns)``."""
    return add_document


@pytest.fixture
def unit_vectors() -> Callable[..., np.ndarray[Any, Any]]:
    """``unit_vectors(count, seed=)``: normalised random vectors."""
    return random_unit_vectors
