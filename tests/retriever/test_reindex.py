"""`lectern reindex` moves the index to another model while clients keep asking.

A fresh database indexed with the packaged MiniLM (384 dimensions) is re-indexed to Gemini's
``gemini-embedding-001`` at 768 dimensions, served by the local fake of Gemini's REST API, by
the real `lectern reindex` command in a subprocess. Meanwhile ten clients keep asking the real
retriever and the memory service (both started on MiniLM), and a writer keeps adding chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lectern_testing.gemini_fake import Behaviour, FakeGemini
from lectern_testing.plugin import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL

from lectern_common.db import create_pool, migrate
from lectern_common.embeddings import Embedder, GeminiEmbedder
from lectern_common.events import MemoryRecallRequest, RetrieveRequest
from lectern_common.index import IndexModel, ModelSwitched, guard, live_model
from lectern_common.reindex import ReindexError, reindex

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPICS = [
    ("RuBisCO fixes carbon dioxide in the Calvin cycle of photosynthesis.", "rubisco calvin"),
    ("The French Revolution began in 1789 with the storming of the Bastille.", "bastille 1789"),
    ("Newton's second law says force equals mass times acceleration.", "newton force mass"),
    ("Mitochondria carry out cellular respiration and make ATP.", "mitochondria respiration"),
    ("Plate tectonics explains earthquakes at the edges of moving plates.", "tectonics plates"),
]
FILLER = [f"Filler note {i} about topic number {i} in the long appendix." for i in range(1500)]


@pytest.fixture
async def fresh_dsn(fresh_database: str) -> str:
    """A database of its own (the switch changes every vector column), migrated on MiniLM."""
    await migrate(
        fresh_database, embedding_model=LOCAL_EMBEDDING_MODEL, embedding_dim=LOCAL_EMBEDDING_DIM
    )
    return fresh_database


@pytest.fixture
def fake() -> Any:
    with FakeGemini() as server:
        yield server


def _settings(cls: Any, nats_url: str, dsn: str, fake: Any, **extra: Any) -> Any:
    return cls(
        nats_url=nats_url, database_url=dsn, http_port=0, gemini_api_key="test-key",
        gemini_base_url=fake.base_url, gemini_embedding_dim=768, llm_rewrite=False, **extra,
    )  # fmt: skip


async def _seed(pool: Any, embedder: Embedder, tenant_id: str) -> None:
    from tests.retriever.conftest import add_document

    texts = [t for t, _ in TOPICS] + FILLER
    await add_document(pool, tenant_id=tenant_id, texts=texts, embedder=embedder, title="Notes")
    vector = (await embedder.embed_documents(["Struggled with the Calvin cycle"]))[0]
    await pool.execute(
        "INSERT INTO user_memories (id, tenant_id, user_id, kind, text, topic, embedding) "
        "VALUES ($1, $2, 'stu', 'struggle', 'Struggled with the Calvin cycle', 'photosynthesis', "
        "$3::vector::halfvec)",
        uuid.uuid4(), tenant_id, vector,
    )  # fmt: skip
    vector = (await embedder.embed_documents(["BIO.1: Photosynthesis and the Calvin cycle"]))[0]
    await pool.execute(
        "INSERT INTO curriculum_standards (tenant_id, code, description, embedding) "
        "VALUES ($1, 'BIO.1', 'Photosynthesis and the Calvin cycle', $2)",
        tenant_id, vector,
    )  # fmt: skip


async def _column_type(pool: Any, table: str) -> str:
    return str(
        await pool.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
            "$1::regclass AND attname = 'embedding' AND NOT attisdropped",
            table,
        )
    )


async def _next_columns(pool: Any) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM pg_attribute a JOIN pg_class t ON t.oid = a.attrelid "
            "WHERE a.attname = 'embedding_next' AND NOT a.attisdropped AND t.relkind = 'r'"
        )
    )


async def _run_cli(dsn: str, fake: Any, *args: str) -> tuple[int, str, str]:
    lectern = Path(sys.executable).with_name("lectern")
    env = {
        **os.environ,
        "LECTERN_DATABASE_URL": dsn,
        "LECTERN_GEMINI_API_KEY": "test-key",
        "LECTERN_GEMINI_BASE_URL": fake.base_url,
    }
    process = await asyncio.create_subprocess_exec(
        str(lectern), "reindex", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_reindex_to_another_model_while_ten_clients_ask(
    nats_url: str, fresh_dsn: str, fake: Any, tenant_id: str
) -> None:
    from lectern_common.embeddings import LocalEmbedder
    from lectern_memory.config import Settings as MemorySettings
    from lectern_memory.service import MemoryService
    from lectern_retriever.config import Settings as RetrieverSettings
    from lectern_retriever.handlers import Retriever

    retriever_settings = _settings(RetrieverSettings, nats_url, fresh_dsn, fake)
    local = LocalEmbedder(retriever_settings)
    retriever = Retriever(settings=retriever_settings, embedder=local)
    await retriever.start()
    memory = MemoryService(
        settings=_settings(MemorySettings, nats_url, fresh_dsn, fake), embedder=local
    )
    pool = await create_pool(fresh_dsn, min_size=1, max_size=6)
    try:
        await _seed(pool, local, tenant_id)
        assert await _column_type(pool, "chunks") == "vector(384)"
        done, on_gemini = asyncio.Event(), asyncio.Event()
        failures: list[str] = []
        answers: list[tuple[float, str, bool]] = []

        async def client(n: int) -> None:
            text, query = TOPICS[n % len(TOPICS)]
            while not done.is_set():
                try:
                    reply = await retriever.retrieve(
                        RetrieveRequest(tenant_id=tenant_id, query=query, k=3)
                    )
                    top = reply.candidates[0].text if reply.candidates else ""
                    answers.append((time.monotonic(), retriever.embedder.name, top == text))  # type: ignore[union-attr]
                    if sum(1 for a in answers if a[1] == "gemini-embedding-001") > 20:
                        on_gemini.set()
                    if n == 0:
                        recalled = await memory.recall(
                            pool=pool,
                            request=MemoryRecallRequest(
                                tenant_id=tenant_id, user_id="stu", query="calvin cycle"
                            ),
                        )
                        if not recalled.memories:
                            failures.append("memory recall found nothing")
                except Exception as exc:
                    failures.append(repr(exc))
                await asyncio.sleep(0.01)

        written = 0

        async def writer() -> None:
            # an ingest-like writer: embeds with the model it knows, guards, and stops at
            # the switch (ingest would follow the new model and embed again)
            nonlocal written
            while not done.is_set():
                vector = (await local.embed_documents([f"late note {written}"]))[0]
                try:
                    async with pool.acquire() as conn, conn.transaction():
                        await guard(conn, local.name)
                        document = await conn.fetchval("SELECT id FROM documents LIMIT 1")
                        await conn.execute(
                            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, "
                            "token_count, embedding, content_hash) "
                            "VALUES ($1, $2, $3, $4, $5, 3, $6, 'late')",
                            uuid.uuid4(), document, tenant_id, 10_000 + written,
                            f"late note {written}", np.asarray(vector),
                        )  # fmt: skip
                    written += 1
                except ModelSwitched:
                    return
                await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(client(n)) for n in range(10)]
        writing = asyncio.create_task(writer())
        await asyncio.sleep(1.0)  # answering on MiniLM first
        code, out, err = await _run_cli(
            fresh_dsn, fake, "--model", "gemini-embedding-001", "--dimension", "768",
            "--batch-size", "16",
        )  # fmt: skip
        assert code == 0, err
        assert "switched from sentence-transformers/all-MiniLM-L6-v2 to gemini-embedding-001" in out
        assert "user_memories: 1/1" in out and "curriculum_standards: 1/1" in out
        # and answering on Gemini after: until 20 answers came on it (a fixed 1.5 s gave
        # 10 on a loaded 2-core CPU), or 60 s, when the check below fails
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(on_gemini.wait(), 60)
        done.set()
        await asyncio.gather(*tasks, writing)

        assert failures == []
        build_s = float(re.search(r" in ([0-9.]+) s ", out)[1])  # type: ignore[index]
        # answers are stamped when they complete: the first one on the new model comes after
        # the switch committed (a guarded query waits for it); only requests already in
        # flight can complete on the old model after that
        first = next(i for i, a in enumerate(answers) if a[1] == "gemini-embedding-001")
        switch = answers[first][0]
        before, after = answers[:first], answers[first:]
        assert {a[1] for a in before} == {LOCAL_EMBEDDING_MODEL}
        stragglers = [a for a in after if a[1] == LOCAL_EMBEDDING_MODEL]
        assert len(stragglers) < 10, len(stragglers)
        during = [a for a in before if a[0] > switch - build_s]
        assert len(during) > 20, (build_s, len(during))  # asked while the new index was built
        after = [a for a in after if a[1] == "gemini-embedding-001"]
        assert len(after) > 20, len(after)
        assert all(a[2] for a in after), sum(not a[2] for a in after)
        assert written > 0
        async with pool.acquire() as conn:
            assert await live_model(conn) == IndexModel("gemini-embedding-001", 768)
        assert await _column_type(pool, "chunks") == "vector(768)"
        assert await _column_type(pool, "user_memories") == "halfvec(768)"
        assert await _column_type(pool, "curriculum_standards") == "vector(768)"
        assert await _next_columns(pool) == 0
        hnsw = await pool.fetchval("SELECT pg_get_indexdef('chunks_embedding_hnsw'::regclass)")
        assert "hnsw (embedding vector_cosine_ops)" in hnsw
        # every chunk, the ones written during the build too, has a vector of the new model
        count = await pool.fetchval("SELECT count(*) FROM chunks")
        assert count == len(TOPICS) + len(FILLER) + written
        build = await pool.fetchrow("SELECT * FROM index_builds")
        assert build["status"] == "switched" and build["done"] >= len(TOPICS) + len(FILLER)
        code, out, _ = await _run_cli(fresh_dsn, fake, "--status")
        assert code == 0 and "live index: gemini-embedding-001 (768 dimensions)" in out
        assert "switched" in out
        # a service started later on MiniLM follows the index's model at start-up
        late = Retriever(settings=retriever_settings, embedder=local)
        await late.start()
        try:
            assert late.embedder is not None and late.embedder.name == "gemini-embedding-001"
        finally:
            await late.close()
    finally:
        await pool.close()
        await retriever.close()


async def test_a_failed_reindex_leaves_the_live_index_untouched(
    fresh_dsn: str, fake: Any, tenant_id: str
) -> None:
    from lectern_common.embeddings import LocalEmbedder

    local = LocalEmbedder()
    pool = await create_pool(fresh_dsn, min_size=1, max_size=2)
    try:
        await _seed(pool, local, tenant_id)
        # two batches embed, then the model refuses: the half-built index is dropped
        fake.enqueue(Behaviour(), Behaviour(), endpoint="embed")
        fake.fail(400, times=20, endpoint="embed")
        from google import genai
        from google.genai import types

        client = genai.Client(
            api_key="k",
            http_options=types.HttpOptions(base_url=fake.base_url, api_version="v1beta"),
        )
        gemini = GeminiEmbedder(client=client, model="gemini-embedding-001", dimension=768)
        progress: list[tuple[str, int, int]] = []
        with pytest.raises(ReindexError, match="undone"):
            await reindex(fresh_dsn, gemini, batch_size=100, progress=_append(progress))
        assert progress and progress[-1][1] == 200  # it had started
        async with pool.acquire() as conn:
            assert await live_model(conn) == IndexModel(LOCAL_EMBEDDING_MODEL, 384)
        assert await _column_type(pool, "chunks") == "vector(384)"
        assert await _next_columns(pool) == 0
        build = await pool.fetchrow("SELECT status, error FROM index_builds")
        assert build["status"] == "failed" and build["error"]
        # a run that was killed mid-way is marked failed by the next one
        await pool.execute(
            "INSERT INTO index_builds (id, model, dimension, previous_model, status) "
            "VALUES ($1, 'x', 768, 'y', 'building')",
            uuid.uuid4(),
        )
        # the same model again is refused
        with pytest.raises(ReindexError, match="already holds"):
            await reindex(fresh_dsn, local)
        fake.reset()
        report = await reindex(fresh_dsn, gemini, batch_size=100)
        assert report.model == IndexModel("gemini-embedding-001", 768)
        statuses = await pool.fetch("SELECT status, error FROM index_builds ORDER BY started_at")
        assert [r["status"] for r in statuses] == ["failed", "failed", "switched"]
        assert "interrupted" in statuses[1]["error"]
    finally:
        await pool.close()


def _append(into: list[tuple[str, int, int]]) -> Callable[[str, int, int], None]:
    return lambda table, done, total: into.append((table, done, total))
