"""Memory recall latency at 10,000 memories for one student (issue target: p95 < 30 ms).

Starts the embedded Postgres, inserts 10,000 memories for one student plus 40,000 for other
students of the same tenant, then measures recall through ``MemoryService.recall`` (query
embedding with the packaged MiniLM + the SQL ranking + re-scoring), and the SQL part alone.
Prints the ratio of the SQL part to the whole; last line is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from lectern_common.db import create_pool, migrate
from lectern_common.embeddings import LOCAL_MODEL_NAME, LocalEmbedder
from lectern_common.events import MemoryRecallRequest
from lectern_common.runtime import EmbeddedPostgres
from lectern_memory import repository as repo
from lectern_memory.config import Settings
from lectern_memory.service import MemoryService

TOPICS = ["mitosis", "meiosis", "photosynthesis", "osmosis", "fractions", "derivatives",
          "integrals", "the french revolution", "plate tectonics", "covalent bonds"]  # fmt: skip
N_STUDENT, N_OTHERS, N_QUERIES = 10_000, 40_000, 200


def pct(values: list[float], q: float) -> float:
    """The q-th percentile."""
    return float(np.percentile(np.asarray(values), q))


async def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="lectern-bench-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    pg = EmbeddedPostgres(base / "pg")
    pg.start()
    try:
        await migrate(pg.dsn, embedding_model=LOCAL_MODEL_NAME, embedding_dim=384)
        pool = await create_pool(pg.dsn, min_size=2, max_size=4)
        embedder = LocalEmbedder()
        topic_vectors = await embedder.embed_documents([f"Found {t} hard" for t in TOPICS])
        rng = np.random.default_rng(7)
        rows = []
        for i in range(N_STUDENT + N_OTHERS):
            user = "student-0" if i < N_STUDENT else f"student-{1 + i % 400}"
            topic = i % len(TOPICS)
            vec = topic_vectors[topic] + rng.normal(0, 0.08, 384).astype(np.float32)
            vec /= np.linalg.norm(vec)
            text = f"Found {TOPICS[topic]} hard #{i}"
            rows.append(
                (uuid.uuid4(), "bench", user, "struggle", text, TOPICS[topic], 1.0 + i % 5, vec)
            )
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            await conn.copy_records_to_table(
                "user_memories", records=rows,
                columns=["id", "tenant_id", "user_id", "kind", "text", "topic", "strength",
                         "embedding"],
            )  # fmt: skip
            await conn.execute("ANALYZE user_memories")
        load_s = time.perf_counter() - t0
        service = MemoryService(settings=Settings(), embedder=embedder)
        queries = [f"I still don't get {TOPICS[i % len(TOPICS)]}" for i in range(N_QUERIES)]
        total_ms, sql_ms = [], []
        for q in queries[:10]:  # warm-up
            await service.recall(pool=pool, request=MemoryRecallRequest(
                tenant_id="bench", user_id="student-0", query=q))  # fmt: skip
        for q in queries:
            t = time.perf_counter()
            reply = await service.recall(pool=pool, request=MemoryRecallRequest(
                tenant_id="bench", user_id="student-0", query=q))  # fmt: skip
            total_ms.append((time.perf_counter() - t) * 1000)
            assert len(reply.memories) == 3
            vector = await embedder.embed_query(q)
            t = time.perf_counter()
            async with pool.acquire() as conn:
                await repo.recall_candidates(
                    conn, tenant_id="bench", user_id="student-0", embedding=vector, limit=50
                )
            sql_ms.append((time.perf_counter() - t) * 1000)
        await pool.close()
    finally:
        pg.stop()
    result = {
        "memories_for_student": N_STUDENT,
        "memories_total": N_STUDENT + N_OTHERS,
        "load_s": round(load_s, 2),
        "recall_p50_ms": round(statistics.median(total_ms), 2),
        "recall_p95_ms": round(pct(total_ms, 95), 2),
        "sql_p50_ms": round(statistics.median(sql_ms), 2),
        "sql_p95_ms": round(pct(sql_ms, 95), 2),
    }
    print(f"recall p95 {result['recall_p95_ms']} ms (target < 30), of which SQL p95 "
          f"{result['sql_p95_ms']} ms; SQL share of p50 "
          f"{result['sql_p50_ms'] / result['recall_p50_ms']:.2f}")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
