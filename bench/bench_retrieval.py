"""Retrieval benchmark: quality on BEIR sets, a real BM25 for comparison, latency at 100k chunks.

    .venv/bin/python bench/bench_retrieval.py [--limit-queries N] [--chunks 100000]
        [--requests 1000] [--concurrency 16] [--skip-quality] [--skip-scale] [--cache-dir DIR]

1. ``lectern eval`` (self-contained: embedded NATS + Postgres, the real retriever over NATS)
   on ../shared/data/eval/bioasq-dev and ../shared/data/eval/pubmedqa-pqal: nDCG@10 and
   recall for dense, sparse (BM25 in Postgres) and hybrid.
2. bm25s (k1 0.9, b 0.4, English stopwords) on the same data, scored with the same metrics.
3. Scale: a fresh database with ``--chunks`` chunks (the 14,449 distinct bioasq-dev and
   pubmedqa texts, embedded with the real model, replicated with jittered vectors, 10 chunks
   per document), BM25-indexed by the SQL functions; bioasq questions sent
   through NATS to ``--replicas`` retriever processes (``python -m lectern_retriever``, one
   queue group). Latency excludes the query embedding (the reply's total minus its embed
   stage); requests/s is end to end (embedding included) with ``--concurrency`` requests in
   flight, loopback only.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import numpy as np
from inprocess import Stack, embedded_stack

from lectern_cli.runtime.embedded import embedded_system
from lectern_common.embeddings import LocalEmbedder
from lectern_eval.retrieval import (
    BeirDataset,
    document_ranking,
    evaluate,
    load_beir,
    mean_metrics,
    percentile,
    query_metrics,
)

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / ".." / "shared" / "data" / "eval"
OFFTOPIC = ROOT / "bench" / "data" / "offtopic_questions.txt"


def say(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def bm25s_metrics(dataset: BeirDataset, query_ids: list[str]) -> dict[str, float]:
    """bm25s over the corpus (title + text), per-document metrics like the harness."""
    import bm25s

    ids = list(dataset.corpus)
    texts = [f"{dataset.corpus[i][0]} {dataset.corpus[i][1]}".strip() for i in ids]
    retriever = bm25s.BM25(k1=0.9, b=0.4)
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    queries = [dataset.queries[q] for q in query_ids]
    tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    results, _ = retriever.retrieve(tokens, k=100, show_progress=False, n_threads=1)
    per_query = []
    for row, query_id in zip(results, query_ids, strict=True):
        ranking = document_ranking([ids[int(i)] for i in row])
        per_query.append(query_metrics(ranking, dataset.qrels[query_id]))
    return mean_metrics(per_query)


async def quality(name: str, limit: int | None, embedder: LocalEmbedder) -> dict[str, Any]:
    """The harness and bm25s on one dataset."""
    directory = EVAL / name
    say(f"== {name}: lectern eval")
    started = time.perf_counter()
    result = await evaluate(
        dataset_dir=directory,
        methods=["dense", "sparse", "hybrid", "hybrid+rerank"],
        limit_queries=limit,
        progress=say,
        offtopic=[q for q in OFFTOPIC.read_text().splitlines() if q.strip()],
        start_stack=embedded_system,
    )
    out = result.to_json()
    out["seconds"] = round(time.perf_counter() - started, 1)
    dataset = load_beir(directory)
    query_ids = sorted(dataset.queries)[:limit] if limit else sorted(dataset.queries)
    out["methods"]["bm25s"] = bm25s_metrics(dataset, query_ids)
    say(json.dumps(out))
    return out


def scale_texts(distinct: int | None = None) -> tuple[list[str], list[str]]:
    """The scale corpus' distinct texts (bioasq-dev and pubmedqa: 14,449; the first
    ``distinct`` of them) and the bioasq questions, in a stable order."""
    dataset = load_beir(EVAL / "bioasq-dev")
    pubmed = load_beir(EVAL / "pubmedqa-pqal")
    # every distinct text at hand (bioasq-dev and pubmedqa: 14,449), replicated to ``chunks``:
    # the fewer the copies, the closer each term's document frequency is to a real corpus's
    texts = [f"{t} {x}".strip() for t, x in (*dataset.corpus.values(), *pubmed.corpus.values())]
    texts = texts[:distinct] if distinct else texts
    questions = [dataset.queries[q] for q in sorted(dataset.queries)]
    return texts, questions


def base_vectors(texts: list[str], cache_dir: Path | None) -> np.ndarray[Any, Any]:
    """The texts embedded once with the real model (kept in ``cache_dir`` when given)."""
    say(f"== scale: embedding {len(texts)} distinct texts for the replicated corpus")
    embed_started = time.perf_counter()
    cached = cache_dir / f"scale-{len(texts)}.npy" if cache_dir else None
    if cached is not None and cached.exists():
        base: np.ndarray[Any, Any] = np.load(cached)
    else:
        base = LocalEmbedder().embed_documents_sync(texts)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.save(cached, base)
    say(f"embedded in {time.perf_counter() - embed_started:.0f} s")
    return base


def jittered(
    base: np.ndarray[Any, Any], rows: list[int], rng: np.random.Generator, *, sigma: float = 0.02
) -> np.ndarray[Any, Any]:
    """Copies of ``base[rows]``, each jittered (normal, ``sigma``) and renormalised.

    A replicated corpus: every text embedded once with the real model, each copy's vector
    jittered (at 0.02: cosine ~0.93 to the original). Random unit vectors would be HNSW's
    pathological case (no neighbourhood structure), not what an index of course text holds.
    """
    jitter = rng.normal(0.0, sigma, (len(rows), base.shape[1])).astype(np.float32)
    vectors: np.ndarray[Any, Any] = base[rows] + jitter
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


async def start_retrievers(servers: Stack, replicas: int) -> list[asyncio.subprocess.Process]:
    """``replicas`` retriever processes (as deployed: ``python -m lectern_retriever``)."""
    env = {
        **os.environ,
        "LECTERN_NATS_URL": servers.nats_url,
        "LECTERN_DATABASE_URL": servers.database_url,
        "LECTERN_RETRIEVER_HTTP_PORT": "0",
        "LECTERN_LOG_LEVEL": "WARNING",
        # the benchmark builds (and drops) tenants' own indexes itself: a replica's
        # maintenance, at its own threshold, would rebuild or drop them under the timing
        "LECTERN_RETRIEVER_TENANT_INDEX_INTERVAL_S": "0",
        "HF_HUB_OFFLINE": "1",
    }
    return [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lectern_retriever", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(replicas)
    ]  # fmt: skip


async def stop_retrievers(processes: list[asyncio.subprocess.Process]) -> None:
    """Terminate the retriever processes and wait for them."""
    for process in processes:
        process.terminate()
    for process in processes:
        await asyncio.wait_for(process.wait(), 30)


async def wait_for_retrievers(
    ask: Callable[[str], Awaitable[Any]], questions: list[str], replicas: int
) -> None:
    """Ask until every replica has loaded its model and subscribed (3 minutes at most)."""
    from lectern_common.errors import LecternError

    deadline = time.monotonic() + 180
    while True:
        try:
            for question in questions[: 10 * replicas]:
                await ask(question)
            break
        except LecternError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


async def throughput(nats_url: str, bodies: list[str], concurrency: int) -> float:
    """Requests per second for these RetrieveRequest bodies, ``concurrency`` in flight.

    The load generator is a bare NATS client (the same request bytes, the reply parsed and
    checked), so that the two cores go to the system under test: the gateway's FastStream
    client with pydantic would itself use ~1.2 ms per request.
    """
    from lectern_common.events import RetrieveRequest

    lean = await nats.connect(nats_url, name="bench-retrieval-load")
    semaphore = asyncio.Semaphore(concurrency)
    headers = {"content-type": "application/json"}

    async def bounded(body: str) -> None:
        async with semaphore:
            reply = await lean.request(
                RetrieveRequest.subject, body.encode(), timeout=60, headers=headers
            )
        answer = json.loads(reply.data)
        if answer.get("error") or not answer.get("candidates"):
            question = json.loads(body).get("query")
            raise RuntimeError(f"retrieval failed for {question!r}: {answer.get('error')}")

    try:
        started = time.perf_counter()
        await asyncio.gather(*(bounded(b) for b in bodies))
        return len(bodies) / (time.perf_counter() - started)
    finally:
        await lean.close()


async def scale(
    *,
    chunks: int,
    requests: int,
    concurrency: int,
    replicas: int,
    distinct: int | None = None,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """Latency and throughput through NATS at ``chunks`` chunks."""
    from lectern_common.broker import create_broker, request
    from lectern_common.db import create_pool
    from lectern_common.events import RetrieveReply, RetrieveRequest

    texts, questions = scale_texts(distinct)
    tenant = "bench-100k"
    per_doc = 10
    rng = np.random.default_rng(0)
    base = base_vectors(texts, cache_dir)
    async with embedded_stack() as servers:
        pool = await create_pool(servers.database_url, min_size=1, max_size=4)
        say(f"== scale: inserting {chunks} chunks")
        started = time.perf_counter()
        async with pool.acquire() as conn:
            # a throwaway database: bulk load without the HNSW index, then build it once
            await conn.execute("DROP INDEX chunks_embedding_hnsw")
            for start in range(0, chunks, 5000):
                count = min(5000, chunks - start)
                rows = [(start + i) % len(texts) for i in range(count)]
                vectors = jittered(base, rows, rng)
                doc_ids = [uuid.uuid4() for _ in range(0, count, per_doc)]
                await conn.executemany(
                    """INSERT INTO documents (id, tenant_id, title, filename, mime_type,
                           size_bytes, file_sha256, uploaded_by, status)
                       VALUES ($1, $2, $3, 'b.txt', 'text/plain', 1, 'x', 'bench', 'indexed')""",
                    [(d, tenant, f"doc {start + n}") for n, d in enumerate(doc_ids)],
                )
                records = [
                    (
                        uuid.uuid4(), doc_ids[i // per_doc], tenant, i % per_doc, "text",
                        texts[(start + i) % len(texts)], 50, "h", "educational", vectors[i],
                    )
                    for i in range(count)
                ]  # fmt: skip
                await conn.copy_records_to_table(
                    "chunks",
                    records=records,
                    columns=[
                        "id", "document_id", "tenant_id", "chunk_index", "kind", "text",
                        "token_count", "content_hash", "collection", "embedding",
                    ],
                )  # fmt: skip
                await conn.execute("SELECT lectern_bm25_index_documents($1::uuid[])", doc_ids)
            insert_s = time.perf_counter() - started
            say(f"inserted and BM25-indexed in {insert_s:.1f} s; building HNSW")
            started = time.perf_counter()
            await conn.execute("SET maintenance_work_mem = '512MB'")
            await conn.execute(
                "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
            )
            hnsw_s = time.perf_counter() - started
            await conn.execute("SELECT lectern_bm25_reweight($1)", tenant)
            await conn.execute("VACUUM ANALYZE chunks")
            await conn.execute("VACUUM ANALYZE documents")
        await pool.close()
        say(f"HNSW built in {hnsw_s:.1f} s")
        # the retriever runs as its own processes (as deployed), the client here
        processes = await start_retrievers(servers, replicas)
        client = create_broker(servers.nats_url, service_name="bench-retrieval")
        await client.connect()
        try:

            async def ask(question: str) -> RetrieveReply:
                message = RetrieveRequest(tenant_id=tenant, query=question)
                return await request(client, message, RetrieveReply, timeout=60)

            await wait_for_retrievers(ask, questions, replicas)
            say("sequential latency")
            latencies: list[float] = []
            stages: dict[str, list[float]] = {}
            for question in questions[: min(len(questions), requests)]:
                reply = await ask(question)
                latencies.append(reply.timings_ms["total"] - reply.timings_ms.get("embed", 0))
                for stage, ms in reply.timings_ms.items():
                    stages.setdefault(stage, []).append(ms)
            say(f"throughput with {concurrency} in flight, {replicas} retriever processes")
            # questions the sequential phase did not ask, as far as there are any
            start = min(requests, len(questions))
            batch = [questions[(start + i) % len(questions)] for i in range(requests)]
            bodies = [RetrieveRequest(tenant_id=tenant, query=q).model_dump_json() for q in batch]
            rps = await throughput(servers.nats_url, bodies, concurrency)
        finally:
            await client.stop()
            await stop_retrievers(processes)
    return {
        "chunks": chunks,
        "distinct_texts": len(texts),
        "insert_and_bm25_s": round(insert_s, 1),
        "hnsw_build_s": round(hnsw_s, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "stages_ms": {
            s: {"p50": round(percentile(v, 50), 2), "p95": round(percentile(v, 95), 2)}
            for s, v in stages.items()
        },
        "rps": round(rps, 1),
        "concurrency": concurrency,
        "retriever_processes": replicas,
    }


async def main() -> None:
    """Run every part and print the summary JSON last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--replicas", type=int, default=2, help="retriever processes (2)")
    parser.add_argument(
        "--distinct", type=int, default=None, help="distinct texts in the 100k corpus (all)"
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="keep the scale corpus' vectors here"
    )
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    if not (EVAL / "bioasq-dev").is_dir():
        say(f"shared data not found at {EVAL}")
        sys.exit(2)
    summary: dict[str, Any] = {}
    if not args.skip_quality:
        embedder = LocalEmbedder()
        bioasq = await quality("bioasq-dev", args.limit_queries, embedder)
        pubmed = await quality("pubmedqa-pqal", args.limit_queries, embedder)
        methods = bioasq["methods"]
        summary.update(
            hybrid_ndcg10=methods["hybrid"]["ndcg@10"],
            dense_ndcg10=methods["dense"]["ndcg@10"],
            sparse_ndcg10=methods["sparse"]["ndcg@10"],
            bm25s_ndcg10=methods["bm25s"]["ndcg@10"],
            bioasq=bioasq,
            pubmedqa=pubmed,
        )
        if "hybrid+rerank" in methods:
            summary["hybrid_rerank_ndcg10"] = methods["hybrid+rerank"]["ndcg@10"]
            summary["bands_bioasq"] = bioasq.get("bands")
    if not args.skip_scale:
        result = await scale(
            chunks=args.chunks,
            requests=args.requests,
            concurrency=args.concurrency,
            replicas=args.replicas,
            distinct=args.distinct,
            cache_dir=args.cache_dir,
        )
        say(json.dumps(result))
        summary.update(p95_ms_100k=result["p95_ms"], rps_100k=result["rps"], scale=result)
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
